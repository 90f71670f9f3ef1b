// What a message costs the Redis server, for tools/redis_cost.sh: the actors' paths and the
// crash-safe peers' commands, run against a server the caller started (under callgrind,
// which counts the server's instructions: deterministic where its CPU time swings with the
// machine's load).
//
//   redis_actor_cost <port> <mode> <messages>
//
// Modes (the peers' commands as in bench/redis_peers.hpp, sent one after the other by
// one thread, so that none blocks):
//   idle64      one thread posts to 64 keys in turn, no executor: each post finds its actor
//               idle, wins it, runs its own message and releases it (the post and one step)
//   busy1       4 threads, each with an actor_system and a one-thread executor, post to
//               one key: most messages queue behind an owner that takes 16 per step
//   busy1_b1    the same with actor_options::batch 1
//   list64      the reliable list over 64 keys: RPUSH, LMOVE to the processing list, LREM
//   stream64    a stream per key over 64 keys, a consumer group: XADD, XREADGROUP COUNT 1,
//               XACK + XDEL
// Prototypes of ownership that outlives one message (the commands a protocol would send,
// not the library; one thread plays the sender and the owner, 64 keys, each message finds
// its actor idle but owned). Delivery counts are left to a takeover (as a stream's are to
// XCLAIM), so the steady state has none:
//   linger64    an owner lingering on its drained actors: the post script RPUSHes and, on
//               the 0 -> 1 append, GETs the owner and RPUSHes the key to that owner's wake
//               list; the owner pops the wake list (BLPOP, here LPOP), reads the batch
//               (LRANGE), handles it, dequeues it (LPOP count) and reads again (LRANGE):
//               empty, it lingers
//   shard64     leases per shard of keys (16 shards): the post script RPUSHes and, on the
//               0 -> 1 append, RPUSHes the key to its shard's ready list; the shard's
//               leaseholder moves a key to its in-flight list (LMOVE), reads, handles,
//               dequeues and reads again as above, then drops the key (LREM)
// Prints "<messages> handled" on success; exits 1 with a message otherwise.
#include <hiredis/hiredis.h>

#include <handoff/redis/actor_system.hpp>
#include <handoff/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis_peers.hpp"

namespace {

namespace peers = handoff::bench::redis_peers;

constexpr int keys = 64;
constexpr int senders = 4;

std::string key_name(int k) { return "cost:" + std::to_string(k); }

// idle64, busy1, busy1_b1: the actors; returns the messages handled.
long actors(int port, const std::string& mode, int messages) {
  std::atomic<long> handled{0};
  handoff::redis::options o;
  o.port = port;
  if (mode == "idle64") {
    handoff::redis::actor_options a;
    a.sweep_interval = std::chrono::milliseconds(0);
    handoff::redis::actor_system system(o, a);
    system.on("cost:", [&](handoff::redis::delivery&) { handled.fetch_add(1); });
    for (int i = 0; i < messages; ++i) system.post(key_name(i % keys), "message " + std::to_string(i));
    return handled.load();
  }
  std::vector<std::thread> threads;
  for (int p = 0; p < senders; ++p) {
    threads.emplace_back([&, p] {
      handoff::thread_pool pool(1);
      handoff::redis::actor_options a;
      a.executor = pool;
      if (mode == "busy1_b1") a.batch = 1;
      handoff::redis::actor_system system(o, a);
      system.on("cost:", [&](handoff::redis::delivery&) { handled.fetch_add(1); });
      for (int i = p; i < messages; i += senders) system.post(key_name(0), "message " + std::to_string(i));
      // Stay up until every message ran: this process may own the actor.
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(600);
      while (handled.load() < messages && std::chrono::steady_clock::now() < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  for (auto& t : threads) t.join();
  return handled.load();
}

// list64, stream64: the peers' commands for each message in turn, on one connection.
long peer_commands(int port, const std::string& mode, int messages) {
  const std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnect("127.0.0.1", port), redisFree);
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect");
  long handled = 0;
  if (mode == "stream64") {
    for (int k = 0; k < keys; ++k) {
      (void)peers::command(c.get(), {"XGROUP", "CREATE", key_name(k), "g", "$", "MKSTREAM"});  // a fresh server
    }
  }
  for (int i = 0; i < messages; ++i) {
    const std::string key = key_name(i % keys);
    const std::string body = "message " + std::to_string(i);
    if (mode == "list64") {
      const std::string processing = key + ":processing";
      (void)peers::command(c.get(), {"RPUSH", key, body});
      const std::string got = peers::text(peers::command(c.get(), {"LMOVE", key, processing, "LEFT", "RIGHT"}).get());
      (void)peers::command(c.get(), {"LREM", processing, "1", got});
    } else {
      const std::string id = peers::text(peers::command(c.get(), {"XADD", key, "*", "m", body}).get());
      (void)peers::command(c.get(), {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", key, ">"});
      (void)peers::command(c.get(), {"XACK", key, "g", id});
      (void)peers::command(c.get(), {"XDEL", key, id});
    }
    ++handled;
  }
  return handled;
}

// linger64, shard64: the prototypes' commands for each message in turn, on one connection.
long prototype_commands(int port, const std::string& mode, int messages) {
  const std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnect("127.0.0.1", port), redisFree);
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect");
  const bool linger = mode == "linger64";
  const std::string post = peers::text(
      peers::command(c.get(), {"SCRIPT", "LOAD",
                               linger ? "local n = redis.call('RPUSH', KEYS[1], ARGV[1]) "
                                        "if n == 1 and redis.call('GET', KEYS[2]) then "
                                        "redis.call('RPUSH', KEYS[3], ARGV[2]) end return n"
                                      : "local n = redis.call('RPUSH', KEYS[1], ARGV[1]) "
                                        "if n == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end return n"})
          .get());
  for (int k = 0; linger && k < keys; ++k) (void)peers::command(c.get(), {"SET", key_name(k) + ":owner", "me"});
  long handled = 0;
  for (int i = 0; i < messages; ++i) {
    const std::string key = key_name(i % keys);
    const std::string mailbox = key + ":mailbox";
    const std::string shard = std::to_string(i % keys % 16);
    const std::string ready = "ready:" + shard;
    const std::string in_flight = "in_flight:" + shard;
    if (linger) {
      (void)peers::command(c.get(), {"EVALSHA", post, "3", mailbox, key + ":owner", "wake:me", "message", key});
      if (peers::text(peers::command(c.get(), {"LPOP", "wake:me"}).get()) != key) throw std::runtime_error("no wake");
    } else {
      (void)peers::command(c.get(), {"EVALSHA", post, "2", mailbox, ready, "message", key});
      if (peers::text(peers::command(c.get(), {"LMOVE", ready, in_flight, "LEFT", "RIGHT"}).get()) != key) {
        throw std::runtime_error("not ready");
      }
    }
    const peers::reply_ptr batch = peers::command(c.get(), {"LRANGE", mailbox, "0", "15"});
    if (batch->type != REDIS_REPLY_ARRAY || batch->elements != 1) throw std::runtime_error("no batch");
    ++handled;
    (void)peers::command(c.get(), {"LPOP", mailbox, "1"});
    if (peers::command(c.get(), {"LRANGE", mailbox, "0", "15"})->elements != 0) throw std::runtime_error("not drained");
    if (!linger) (void)peers::command(c.get(), {"LREM", in_flight, "1", key});
  }
  return handled;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 4) throw std::runtime_error("usage: redis_actor_cost <port> <mode> <messages>");
    const int port = std::stoi(argv[1]);
    const std::string mode = argv[2];
    const int messages = std::stoi(argv[3]);
    long handled = 0;
    if (mode == "idle64" || mode == "busy1" || mode == "busy1_b1") {
      handled = actors(port, mode, messages);
    } else if (mode == "list64" || mode == "stream64") {
      handled = peer_commands(port, mode, messages);
    } else if (mode == "linger64" || mode == "shard64") {
      handled = prototype_commands(port, mode, messages);
    } else {
      throw std::runtime_error("unknown mode " + mode);
    }
    if (handled != messages) throw std::runtime_error(std::to_string(handled) + " of " + argv[3] + " handled");
    std::printf("%ld handled\n", handled);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_actor_cost: %s\n", e.what());
    return 1;
  }
}
