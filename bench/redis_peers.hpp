// The worker-per-key peers of bench/redis_actor_bench.cpp, in raw hiredis: the loop one
// worker thread runs for its key, and the command a sender makes per message. Each worker
// owns one connection and one key; `handle(body, size)` is the message's handler, `alive()`
// says whether to go on (checked at least every 50 ms: the blocking reads time out then).
//
//   blpop_worker          BLPOP <key>; senders RPUSH. The message is off the server before
//                         its handler runs: a worker that crashes then loses it.
//   reliable_list_worker  BLMOVE <key> <key>:processing LEFT RIGHT, handle, LREM
//                         <key>:processing 1 <msg>; senders RPUSH. Batch n > 1: after the
//                         blocking BLMOVE, n - 1 LMOVEs of the same kind pipelined in one
//                         round trip (the ones that find the list empty answer nil), the
//                         batch handled in order, then its LREMs pipelined in one round
//                         trip. Recovery: at start and every `sweep`, LRANGE the processing
//                         list and handle + LREM each message on it (a crashed
//                         predecessor's; a clean run finds it empty).
//   stream_worker         one stream per key, consumer group g, consumer c<k>: XREADGROUP
//                         GROUP g c<k> COUNT n BLOCK 50 STREAMS <key> >, handle, then XACK
//                         <key> g <ids> and XDEL <key> <ids> pipelined (one round trip);
//                         senders XADD <key> * m <msg>; set-up XGROUP CREATE <key> g $
//                         MKSTREAM. Recovery: at start and every `sweep`, XAUTOCLAIM <key> g
//                         c<k> <min_idle> 0-0 COUNT 16, handled and acknowledged the same way.
//   floor (two_scripts)   not a worker: the sender runs EVALSHA of a script that only
//                         RPUSHes, then of one that only LPOPs, and handles what it popped:
//                         two scripts per message, the least a script-based ownership
//                         protocol sends.
//
// Every function throws std::runtime_error on a failed command or an unexpected reply.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace handoff::bench::redis_peers {

struct reply_free {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;

// The reply to a command sent with redisCommandArgv; throws on no reply or an error reply.
inline reply_ptr command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  reply_ptr r(static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data())));
  if (r == nullptr) throw std::runtime_error(args[0] + ": connection failed");
  if (r->type == REDIS_REPLY_ERROR) throw std::runtime_error(args[0] + ": " + std::string(r->str, r->len));
  return r;
}

// Appends commands without waiting, then reads their replies in order: one round trip.
inline std::vector<reply_ptr> pipeline(redisContext* c, const std::vector<std::vector<std::string>>& commands) {
  for (const auto& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()) != REDIS_OK) {
      throw std::runtime_error(args[0] + ": append failed");
    }
  }
  std::vector<reply_ptr> replies;
  for (const auto& args : commands) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) throw std::runtime_error(args[0] + ": connection failed");
    replies.emplace_back(static_cast<redisReply*>(r));
    if (replies.back()->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error(args[0] + ": " + std::string(replies.back()->str, replies.back()->len));
    }
  }
  return replies;
}

inline std::string text(const redisReply* r) { return {r->str, r->len}; }

template <class Handle, class Alive>
void blpop_worker(redisContext* c, const std::string& key, Handle handle, Alive alive) {
  while (alive()) {
    const reply_ptr r = command(c, {"BLPOP", key, "0.05"});
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) handle(r->element[1]->str, r->element[1]->len);
  }
}

template <class Handle, class Alive>
void reliable_list_worker(redisContext* c, const std::string& key, std::size_t batch, std::chrono::milliseconds sweep,
                          Handle handle, Alive alive) {
  const std::string processing = key + ":processing";
  // Handles the messages in order, then removes them from the processing list, every LREM
  // in one round trip; each must find its message.
  const auto handle_and_remove = [&](const std::vector<std::string>& messages) {
    std::vector<std::vector<std::string>> removes;
    for (const std::string& m : messages) {
      handle(m.data(), m.size());
      removes.push_back({"LREM", processing, "1", m});
    }
    for (const reply_ptr& r : pipeline(c, removes)) {
      if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) throw std::runtime_error("LREM: message not found");
    }
  };
  const auto recover = [&] {
    const reply_ptr r = command(c, {"LRANGE", processing, "0", "-1"});
    std::vector<std::string> left;
    for (std::size_t i = 0; i < r->elements; ++i) left.push_back(text(r->element[i]));
    if (!left.empty()) handle_and_remove(left);
  };
  recover();
  auto next_sweep = std::chrono::steady_clock::now() + sweep;
  const std::vector<std::vector<std::string>> more(batch - 1, {"LMOVE", key, processing, "LEFT", "RIGHT"});
  while (alive()) {
    if (std::chrono::steady_clock::now() >= next_sweep) {
      recover();
      next_sweep = std::chrono::steady_clock::now() + sweep;
    }
    const reply_ptr first = command(c, {"BLMOVE", key, processing, "LEFT", "RIGHT", "0.05"});
    if (first->type != REDIS_REPLY_STRING) continue;  // timed out
    std::vector<std::string> messages{text(first.get())};
    if (!more.empty()) {
      for (const reply_ptr& r : pipeline(c, more)) {
        if (r->type == REDIS_REPLY_STRING) messages.push_back(text(r.get()));
      }
    }
    handle_and_remove(messages);
  }
}

// XGROUP CREATE <key> g $ MKSTREAM: before any XADD to the key.
inline void stream_setup(redisContext* c, const std::string& key) {
  (void)command(c, {"XGROUP", "CREATE", key, "g", "$", "MKSTREAM"});
}

template <class Handle, class Alive>
void stream_worker(redisContext* c, const std::string& key, const std::string& consumer, std::size_t batch,
                   std::chrono::milliseconds sweep, std::chrono::milliseconds min_idle, Handle handle, Alive alive) {
  // `entries`: an array of [id, [field, value, ...]]. Handles each entry's "m" in order,
  // then XACK + XDEL of all their ids in one round trip.
  const auto handle_and_ack = [&](const redisReply* entries) {
    if (entries->type != REDIS_REPLY_ARRAY || entries->elements == 0) return;
    std::vector<std::string> ack{"XACK", key, "g"};
    std::vector<std::string> del{"XDEL", key};
    for (std::size_t i = 0; i < entries->elements; ++i) {
      const redisReply* e = entries->element[i];
      const redisReply* fields = e->element[1];
      if (fields->type != REDIS_REPLY_ARRAY || fields->elements != 2) throw std::runtime_error("stream entry: no m");
      handle(fields->element[1]->str, fields->element[1]->len);
      ack.push_back(text(e->element[0]));
      del.push_back(text(e->element[0]));
    }
    const auto n = static_cast<long long>(entries->elements);
    for (const reply_ptr& r : pipeline(c, {ack, del})) {
      if (r->type != REDIS_REPLY_INTEGER || r->integer != n) throw std::runtime_error("XACK/XDEL: count differs");
    }
  };
  const std::vector<std::string> claim{"XAUTOCLAIM", key,     "g", consumer, std::to_string(min_idle.count()),
                                       "0-0",        "COUNT", "16"};
  const auto recover = [&] {
    const reply_ptr r = command(c, claim);  // [next start, [entries], [deleted ids]]
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) throw std::runtime_error("XAUTOCLAIM: unexpected reply");
    handle_and_ack(r->element[1]);
  };
  recover();
  auto next_sweep = std::chrono::steady_clock::now() + sweep;
  const std::vector<std::string> read{"XREADGROUP", "GROUP", "g",       consumer, "COUNT", std::to_string(batch),
                                      "BLOCK",      "50",    "STREAMS", key,      ">"};
  while (alive()) {
    if (std::chrono::steady_clock::now() >= next_sweep) {
      recover();
      next_sweep = std::chrono::steady_clock::now() + sweep;
    }
    const reply_ptr r = command(c, read);  // nil on timeout, else [[key, [entries]]]
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) continue;
    handle_and_ack(r->element[0]->element[1]);
  }
}

// The floor's two scripts: SCRIPT LOAD on the connection's server, their SHA1s.
struct two_scripts {
  std::string push;
  std::string pop;
};

inline two_scripts load_two_scripts(redisContext* c) {
  return {text(command(c, {"SCRIPT", "LOAD", "return redis.call('RPUSH', KEYS[1], ARGV[1])"}).get()),
          text(command(c, {"SCRIPT", "LOAD", "return redis.call('LPOP', KEYS[1])"}).get())};
}

// One message of the floor: push it, pop the list's head (never empty: every sender pops
// after its own push) and handle that.
template <class Handle>
void two_scripts_message(redisContext* c, const two_scripts& s, const std::string& key, const std::string& body,
                         Handle handle) {
  (void)command(c, {"EVALSHA", s.push, "1", key, body});
  const reply_ptr r = command(c, {"EVALSHA", s.pop, "1", key});
  if (r->type != REDIS_REPLY_STRING) throw std::runtime_error("LPOP script: empty list");
  handle(r->str, r->len);
}

}  // namespace handoff::bench::redis_peers
