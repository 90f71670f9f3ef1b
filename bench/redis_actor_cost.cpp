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
// Prototypes of ownership per shard (N = 256 shards, key k in shard k mod 256; one queue
// per shard, one owner per shard holding a lease whose value is its epoch): one thread
// posts a round of R messages over the keys in turn, then plays the owner of every shard:
// one read of the shards the round touched (as a wake would name them), the handlers,
// then one acknowledgement script for all of them (one server: one script may cover
// several shards; a cluster sends one per shard), which checks each shard's lease against
// the epoch before it acknowledges. Named shard<K>_<queue>_r<R>, K the keys (64 or 1), R
// the round (1: every message alone, the paced case; 16 to 256: a busy owner):
//   queue g   a stream and a consumer group per shard: XADD per post, XREADGROUP (> per
//             shard), the script XACKs and XDELs the batch's ids
//   queue x   a stream per shard, no group, the owner's read position in its memory: XADD
//             per post, XREAD after the last id read, the script XDELs the batch's ids
//   queue l   a list per shard: RPUSH per post, one LRANGE per shard the round touched
//             (pipelined), the script LTRIMs the handled head of each
//   then any of: b (l only) the post that takes a shard's list from empty RPUSHes the
//             shard to its owner's bell list, which the owner pops each round; h (l only)
//             the acknowledgement keeps a marker at the head of each shard it visited (all
//             but the last handled element trimmed, that one overwritten by LSET), so that
//             posts to a shard whose owner lingers never find it empty; s the post
//             is a script that refuses a full shard (XLEN, XADD); a the read names all
//             256 shards (no wake says which); k the entry's one field is the key, its
//             value the body; p its one field is "m", its value the key's length, a space,
//             the key and the body; m the script reads the leases with one MGET instead of
//             a GET per shard; n no acknowledgement (XADD and the read alone)
// The library's shard parts (lib/redis/actor/shard_owner.hpp, not yet behind actor_system),
// in the poster's hand-off, 256 shards:
//   owner<K>_r<R>  one thread posts a round of R messages over K keys (an RPUSH each; a
//             post that finds its shard's queue empty takes the shard: the take script and
//             a read of its done set), then drains the shards it took: per shard a read,
//             the acknowledgement script, a read that finds nothing and the release that
//             checks the queue is empty (and, once, a renewal of every lease held)
//   renew256  per "message", one period of an owner of all 256 shards: one script
//             renewing each lease that still holds the epoch (GET, PEXPIRE)
//   poll256   per "message", one idle poll of the 256 shards' lists (LLEN, pipelined)
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

#include "../lib/redis/actor/shard_owner.hpp"
#include "../lib/redis/actor/shard_store.hpp"
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

// shard<K>_l<letters>_r<R>: a list per shard (above).
long shard_list_commands(redisContext* c, int key_count, int round, bool read_all, bool bell, bool marker,
                         int messages) {
  constexpr int shards = 256;
  const auto queue = [](int shard) { return "{s" + std::to_string(shard) + "}:q"; };
  const auto lease = [](int shard) { return "{s" + std::to_string(shard) + "}:lease"; };
  // KEYS: per shard its list and its lease. ARGV: the epoch, then per shard how many
  // entries at the head were handled. The leases are read with one MGET.
  // h: the acknowledgement keeps the last handled element, overwritten with the marker "~".
  const std::string trim = marker ? "redis.call('LTRIM', KEYS[i], ARGV[(i + 1) / 2 + 1] - 1, '-1') "
                                    "redis.call('LSET', KEYS[i], 0, '~') "
                                  : "redis.call('LTRIM', KEYS[i], ARGV[(i + 1) / 2 + 1], '-1') ";
  const std::string ack =
      peers::text(peers::command(c, {"SCRIPT", "LOAD",
                                     "local leases = {} for i = 2, #KEYS, 2 do leases[#leases + 1] = KEYS[i] end "
                                     "local epochs = redis.call('MGET', unpack(leases)) local done = 0 "
                                     "for i = 1, #KEYS, 2 do "
                                     "  if epochs[(i + 1) / 2] == ARGV[1] then " +
                                         trim + "done = done + 1 end end return done"})
                      .get());
  for (int s = 0; s < shards; ++s) (void)peers::command(c, {"SET", lease(s), "7"});
  long handled = 0;
  for (int i = 0; i < messages; i += round) {
    std::vector<bool> touched(shards, false);
    for (int j = i; j < i + round && j < messages; ++j) {
      const int k = j % key_count;
      const int s = k % shards;
      const peers::reply_ptr n =
          peers::command(c, {"RPUSH", queue(s), "id-" + std::to_string(j) + ' ' + key_name(k) + " message"});
      if (bell && n->integer == 1) (void)peers::command(c, {"RPUSH", "bell", std::to_string(s)});
      touched[s] = true;
    }
    if (bell) (void)peers::command(c, {"LPOP", "bell", "256"});  // as the owner's wake would
    std::vector<std::vector<std::string>> reads;
    std::vector<int> named;
    for (int s = 0; s < shards; ++s) {
      if (read_all || touched[s]) {
        named.push_back(s);
        reads.push_back({"LRANGE", queue(s), "0", "1023"});
      }
    }
    const std::vector<peers::reply_ptr> got = peers::pipeline(c, reads);
    std::vector<std::string> call{"EVALSHA", ack, "0", "7"};
    std::vector<std::string> keys_of_call;
    for (std::size_t x = 0; x < got.size(); ++x) {
      if (got[x]->elements == 0) continue;
      keys_of_call.insert(keys_of_call.end(), {queue(named[x]), lease(named[x])});
      call.push_back(std::to_string(got[x]->elements));
      std::size_t run = got[x]->elements;
      if (marker && peers::text(got[x]->element[0]) == "~") --run;  // the marker, trimmed with the rest
      handled += static_cast<long>(run);                            // the handlers
    }
    call[2] = std::to_string(keys_of_call.size());
    call.insert(call.begin() + 3, keys_of_call.begin(), keys_of_call.end());
    (void)peers::command(c, call);
  }
  return handled;
}

// renew256, poll256: what an owner of all 256 shards sends per period, one period per
// "message": the lease renewal (one script: each lease still holding the epoch gets its
// expiry again) and the idle poll (LLEN of each shard's list, pipelined).
long shard_period_commands(redisContext* c, const std::string& mode, int periods) {
  constexpr int shards = 256;
  const std::string renew = peers::text(
      peers::command(
          c, {"SCRIPT", "LOAD",
              "local n = 0 for i = 1, #KEYS do "
              "  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('PEXPIRE', KEYS[i], ARGV[2]) n = n + 1 end "
              "end return n"})
          .get());
  std::vector<std::string> call{"EVALSHA", renew, std::to_string(shards)};
  std::vector<std::vector<std::string>> polls;
  for (int s = 0; s < shards; ++s) {
    const std::string lease = "{s" + std::to_string(s) + "}:lease";
    (void)peers::command(c, {"SET", lease, "7", "PX", "5000"});
    call.push_back(lease);
    polls.push_back({"LLEN", "{s" + std::to_string(s) + "}:q"});
  }
  call.insert(call.end(), {"7", "5000"});
  for (int i = 0; i < periods; ++i) {
    if (mode == "renew256") {
      if (peers::command(c, call)->integer != shards) throw std::runtime_error("not renewed");
    } else {
      (void)peers::pipeline(c, polls);
    }
  }
  return periods;
}

// shard<K>_<queue>_r<R>: the shard prototypes' commands, on one connection (above).
long shard_commands(int port, const std::string& mode, int messages) {
  const std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnect("127.0.0.1", port), redisFree);
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect");
  constexpr int shards = 256;
  const std::size_t a = mode.find('_');
  const std::size_t b = mode.rfind("_r");
  if (a == std::string::npos || b == std::string::npos || b <= a) throw std::runtime_error("bad mode " + mode);
  const int key_count = std::stoi(mode.substr(5, a - 5));
  const std::string queue = mode.substr(a + 1, b - a - 1);
  const int round = std::stoi(mode.substr(b + 2));
  // The queue's letters: g or x first, then any of s, a, k, m, n (above).
  const bool group = queue[0] == 'g';
  const auto has = [&](char f) { return queue.find(f, 1) != std::string::npos; };
  const bool scripted_post = has('s');
  const bool read_all = has('a');
  const bool key_field = has('k');
  const bool packed = has('p');
  const bool mget = has('m');
  const bool no_ack = has('n');
  if (queue[0] == 'l') return shard_list_commands(c.get(), key_count, round, read_all, has('b'), has('h'), messages);
  if (queue[0] != 'g' && queue[0] != 'x') throw std::runtime_error("bad queue " + queue);
  const auto stream = [](int shard) { return "{s" + std::to_string(shard) + "}:q"; };
  const auto lease = [](int shard) { return "{s" + std::to_string(shard) + "}:lease"; };
  // KEYS: per shard its stream and its lease. ARGV: the epoch, then per shard the number of
  // ids and the ids. A shard whose lease holds another epoch is skipped (fenced). With m,
  // the leases are read with one MGET (one server: a cluster's shards are in other slots).
  const std::string check = mget ? "local leases = {} for i = 2, #KEYS, 2 do leases[#leases + 1] = KEYS[i] end "
                                   "local epochs = redis.call('MGET', unpack(leases)) "
                                 : "";
  const std::string fenced = mget ? "epochs[(i + 1) / 2] == epoch" : "redis.call('GET', KEYS[i + 1]) == epoch";
  const std::string ack = peers::text(
      peers::command(c.get(), {"SCRIPT", "LOAD",
                               "local epoch = ARGV[1] local at = 2 local done = 0 " + check +
                                   "for i = 1, #KEYS, 2 do "
                                   "  local n = tonumber(ARGV[at]) "
                                   "  local ids = {unpack(ARGV, at + 1, at + n)} "
                                   "  at = at + n + 1 "
                                   "  if " +
                                   fenced + " then " + (group ? "redis.call('XACK', KEYS[i], 'g', unpack(ids)) " : "") +
                                   "    redis.call('XDEL', KEYS[i], unpack(ids)) done = done + n "
                                   "  end "
                                   "end return done"})
          .get());
  // KEYS: the shard's stream. ARGV: the bound, the key, the body.
  const std::string post =
      peers::text(peers::command(c.get(), {"SCRIPT", "LOAD",
                                           "if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end "
                                           "return redis.call('XADD', KEYS[1], '*', 'k', ARGV[2], 'm', ARGV[3])"})
                      .get());
  for (int s = 0; s < shards; ++s) {
    (void)peers::command(c.get(), {"SET", lease(s), "7"});
    if (group) (void)peers::command(c.get(), {"XGROUP", "CREATE", stream(s), "g", "$", "MKSTREAM"});
  }
  std::vector<std::string> last(shards, "0-0");  // x: the owner's read position per shard
  long handled = 0;
  for (int i = 0; i < messages; i += round) {
    std::vector<bool> touched(shards, false);
    for (int j = i; j < i + round && j < messages; ++j) {
      const int k = j % key_count;
      const int s = k % shards;
      const std::string body = "message " + std::to_string(j);
      if (scripted_post) {
        (void)peers::command(c.get(), {"EVALSHA", post, "1", stream(s), "100000", key_name(k), body});
      } else if (packed) {
        (void)peers::command(
            c.get(), {"XADD", stream(s), "*", "m", std::to_string(key_name(k).size()) + ' ' + key_name(k) + body});
      } else if (key_field) {
        (void)peers::command(c.get(), {"XADD", stream(s), "*", key_name(k), body});
      } else {
        (void)peers::command(c.get(), {"XADD", stream(s), "*", "k", key_name(k), "m", body});
      }
      touched[s] = true;
    }
    std::vector<std::string> read =
        group ? std::vector<std::string>{"XREADGROUP", "GROUP", "g", "owner"} : std::vector<std::string>{"XREAD"};
    read.insert(read.end(), {"COUNT", "1024", "STREAMS"});
    std::vector<int> named;
    for (int s = 0; s < shards; ++s) {
      if (read_all || touched[s]) named.push_back(s);
    }
    for (const int s : named) read.push_back(stream(s));
    for (const int s : named) read.push_back(group ? std::string(">") : last[s]);
    const peers::reply_ptr got = peers::command(c.get(), read);
    if (got->type != REDIS_REPLY_ARRAY) throw std::runtime_error("nothing read");
    std::vector<std::string> call{"EVALSHA", ack, "0", "7"};
    std::vector<std::string> keys_of_call;
    for (std::size_t x = 0; x < got->elements; ++x) {
      const redisReply* shard = got->element[x];
      const std::string name = peers::text(shard->element[0]);
      const int s = std::stoi(name.substr(2, name.find('}') - 2));
      const redisReply* entries = shard->element[1];
      keys_of_call.insert(keys_of_call.end(), {stream(s), lease(s)});
      call.push_back(std::to_string(entries->elements));
      for (std::size_t e = 0; e < entries->elements; ++e) {
        call.push_back(peers::text(entries->element[e]->element[0]));
        ++handled;  // the handler
      }
      last[s] = call.back();
    }
    call[2] = std::to_string(keys_of_call.size());
    call.insert(call.begin() + 3, keys_of_call.begin(), keys_of_call.end());
    if (!no_ack) (void)peers::command(c.get(), call);
  }
  return handled;
}

// owner<K>_r<R>: the library's shard owner, as above; returns the messages handled.
long owner_commands(int port, const std::string& mode, int messages) {
  namespace hd = handoff::redis::detail;
  const std::size_t b = mode.rfind("_r");
  if (b == std::string::npos || b <= 5) throw std::runtime_error("bad mode " + mode);
  const int key_count = std::stoi(mode.substr(5, b - 5));
  const int round = std::stoi(mode.substr(b + 2));
  handoff::redis::options o;
  o.port = port;
  hd::router servers(o);
  hd::shard_store store(servers);
  hd::shard_owner_settings s;
  s.prefix = o.prefix;
  s.family = "cost:";
  s.shards = 256;
  s.owner_id = "cost";
  s.lease_ms = 30000;
  s.read_batch = 256;
  s.max_unfinished = 4096;
  long handled = 0;
  hd::shard_owner owner(
      store, s, [&handled](handoff::redis::delivery&) { ++handled; },
      [](std::string_view, const std::exception_ptr& e) { std::rethrow_exception(e); });
  for (int sent = 0, id = 0; sent < messages;) {
    for (int i = 0; i < round && sent < messages; ++i, ++sent) {
      const std::string key = key_name(sent % key_count);
      const std::uint32_t shard = hd::shard_of(key, s.shards);
      const hd::shard_names names(s.prefix, s.family, shard);
      if (store.post(names, hd::entry_text("c-" + std::to_string(++id), key, "m"), 0) == 1) (void)owner.take(shard);
    }
    owner.drain();
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
    } else if (mode == "renew256" || mode == "poll256") {
      const std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnect("127.0.0.1", port), redisFree);
      if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect");
      handled = shard_period_commands(c.get(), mode, messages);
    } else if (mode.rfind("owner", 0) == 0) {
      handled = owner_commands(port, mode, messages);
    } else if (mode.rfind("shard", 0) == 0) {
      handled = shard_commands(port, mode, messages);
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
