// A prototype of Redis actors owned by shard, in raw hiredis, for bench/redis_actor_bench.cpp:
// what the server and the round trips would cost before the library moves to it
// (docs/notebook.md, "Redis actors owned by shard, prototyped").
//
//   layout   a key belongs to one of `shards` shards (FNV-1a of the key); each shard has
//            one list on the server ({shard:S}:q, elements "<key> <body>"), a lease
//            ({shard:S}:lease, holding its owner's epoch) and one owner at a time. Each
//            owner process has a bell list (shard:bell:<owner>).
//   post     RPUSH to the key's shard; the post whose append takes the list from empty
//            to one element also RPUSHes the shard's number to its owner's bell (the
//            owner may be waiting): one command in the common case, two on an idle shard.
//   owner    reads the shards that had messages in its last round or still have some
//            (one LRANGE each after what it read before, pipelined: one round trip),
//            hands each message to `handle` in list order (the benchmark runs it on the
//            owner's thread, or defers it to the key's in-process actor on a pool), then
//            acknowledges the round with one script that checks every shard's lease
//            against its epoch (one MGET) and LTRIMs the handled prefix of each. Each
//            round also pops its bell (LPOP, in the reads' round trip): the shards that
//            rang are read in the next round. With nothing to read it waits on its bell
//            (BLPOP); without a bell for `poll`, it reads all its shards.
// Left out (the library's work): the lease's renewal and takeover, delivery counts (kept
// at a takeover), dead letters, state, the record of entries handled past a slow key's
// (here they are trimmed once the slow one is: a crash would re-run them), freeing idle
// per-key actors.
//
// Every function throws std::runtime_error on a failed command or an unexpected reply.
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis_peers.hpp"

namespace handoff::bench::shard_prototype {

namespace peers = handoff::bench::redis_peers;

constexpr int shards = 256;

inline int shard_of(std::string_view key) {
  std::uint32_t h = 2166136261U;  // FNV-1a
  for (const char ch : key) h = (h ^ static_cast<unsigned char>(ch)) * 16777619U;
  return static_cast<int>(h % shards);
}
inline std::string queue_name(int s) { return "{shard:" + std::to_string(s) + "}:q"; }
inline std::string lease_name(int s) { return "{shard:" + std::to_string(s) + "}:lease"; }
inline std::string bell_name(int owner) { return "shard:bell:" + std::to_string(owner); }
inline int owner_of(int s, int owners) { return s % owners; }

inline void post(redisContext* c, int owners, std::string_view key, std::string_view body) {
  const int s = shard_of(key);
  std::string element(key);
  element += ' ';
  element += body;
  const peers::reply_ptr r = peers::command(c, {"RPUSH", queue_name(s), element});
  if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
    (void)peers::command(c, {"RPUSH", bell_name(owner_of(s, owners)), std::to_string(s)});
  }
}

// KEYS: per shard its list and its lease. ARGV: the epoch, then per shard how many
// elements at its head were handled. A shard whose lease holds another epoch is left as
// it is (its owner is stale). Replies the shards acknowledged.
inline constexpr const char* ack_script = R"lua(
local leases = {}
for i = 2, #KEYS, 2 do leases[#leases + 1] = KEYS[i] end
local epochs = redis.call('MGET', unpack(leases))
local done = 0
for i = 1, #KEYS, 2 do
  local shard = (i + 1) / 2
  if epochs[shard] == ARGV[1] then
    redis.call('LTRIM', KEYS[i], ARGV[shard + 1], '-1')
    done = done + 1
  end
end
return done
)lua";

// The owner `me` of `owners`: takes its shards (s % owners == me) and drains them until
// alive() is false. handle(key, body, done) runs each message, here or elsewhere, and
// stores true in *done once it ran (release: the acknowledgement reads it). The
// acknowledgement trims each shard's handled prefix; entries read and not yet handled
// (at most `max_unhandled`) stay in the list, so a slow key holds back the trim of its
// shard's later entries, not their handling.
// With `visits` (two counters, may be shared across processes): adds the shard reads that
// found messages to visits[0] and the messages they found to visits[1].
template <class Handle, class Alive>
void owner_loop(redisContext* c, int me, int owners, Handle handle, Alive alive, std::chrono::milliseconds poll,
                std::atomic<std::int64_t>* visits = nullptr, std::size_t max_unhandled = 4096) {
  const std::string epoch = "epoch-" + std::to_string(me);
  const std::string ack = peers::text(peers::command(c, {"SCRIPT", "LOAD", ack_script}).get());
  std::vector<int> mine;
  for (int s = 0; s < shards; ++s) {
    if (owner_of(s, owners) != me) continue;
    mine.push_back(s);
    (void)peers::command(c, {"SET", lease_name(s), epoch});
  }
  // Per shard, the entries read and not trimmed yet, in list order (owner thread only).
  std::vector<std::deque<std::shared_ptr<std::atomic<bool>>>> window(shards);
  std::size_t unhandled = 0;  // entries read whose handler has not finished, as last counted
  const std::string wait_s = std::to_string(static_cast<double>(poll.count()) / 1000.0);
  std::vector<int> reading = mine;  // the shards to read this round: all of them first
  while (alive()) {
    if (reading.empty()) {
      const peers::reply_ptr r = peers::command(c, {"BLPOP", bell_name(me), wait_s});
      if (r->type != REDIS_REPLY_ARRAY) {
        reading = mine;  // no bell for `poll`: a poster may have died between its two commands
        continue;
      }
      // A shard rings once per empty -> non-empty append: read each one once.
      std::vector<bool> rang(shards, false);
      rang[static_cast<std::size_t>(std::stoi(peers::text(r->element[1])))] = true;
      const peers::reply_ptr more = peers::command(c, {"LPOP", bell_name(me), "256"});
      for (std::size_t i = 0; more->type == REDIS_REPLY_ARRAY && i < more->elements; ++i) {
        rang[static_cast<std::size_t>(std::stoi(peers::text(more->element[i])))] = true;
      }
      for (int s = 0; s < shards; ++s) {
        if (rang[static_cast<std::size_t>(s)]) reading.push_back(s);
      }
    }
    const bool room = unhandled < max_unhandled;
    std::vector<std::vector<std::string>> reads;
    if (room) {
      reads.reserve(reading.size());
      for (const int s : reading) {
        const std::size_t from = window[static_cast<std::size_t>(s)].size();
        reads.push_back({"LRANGE", queue_name(s), std::to_string(from), std::to_string(from + 1023)});
      }
    }
    // And the bell, in the same round trip: shards that filled while this owner lingered
    // on others (read in the next round).
    reads.push_back({"LPOP", bell_name(me), "256"});
    std::vector<peers::reply_ptr> got = peers::pipeline(c, reads);
    const peers::reply_ptr rang = std::move(got.back());
    got.pop_back();
    bool read_any = false;
    for (std::size_t x = 0; x < got.size(); ++x) {
      const redisReply& list = *got[x];
      if (list.type != REDIS_REPLY_ARRAY) continue;
      auto& w = window[static_cast<std::size_t>(reading[x])];
      if (visits != nullptr && list.elements > 0) {
        visits[0].fetch_add(1, std::memory_order_relaxed);  // a statistic, read after the run
        visits[1].fetch_add(static_cast<std::int64_t>(list.elements), std::memory_order_relaxed);
      }
      for (std::size_t e = 0; e < list.elements; ++e) {
        const std::string_view element(list.element[e]->str, list.element[e]->len);
        const std::size_t space = element.find(' ');
        if (space == std::string_view::npos) throw std::runtime_error("shard prototype: bad element");
        w.push_back(std::make_shared<std::atomic<bool>>(false));
        handle(element.substr(0, space), element.substr(space + 1), w.back());
        read_any = true;
      }
    }
    // The acknowledgement: each shard's handled prefix.
    std::vector<int> next;
    std::vector<std::string> call{"EVALSHA", ack, "0", epoch};
    std::vector<std::string> keys;
    unhandled = 0;
    for (const int s : reading) {
      auto& w = window[static_cast<std::size_t>(s)];
      std::size_t n = 0;
      while (n < w.size() && w[n]->load(std::memory_order_acquire)) ++n;  // pairs with handle's release store
      if (n > 0) {
        keys.insert(keys.end(), {queue_name(s), lease_name(s)});
        call.push_back(std::to_string(n));
        w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n));
      }
      for (const auto& d : w) unhandled += d->load(std::memory_order_acquire) ? 0 : 1;
      // Linger on the shards that had messages (more may have come) or still have some.
      if (n > 0 || !w.empty()) next.push_back(s);
    }
    for (std::size_t i = 0; rang->type == REDIS_REPLY_ARRAY && i < rang->elements; ++i) {
      const int s = std::stoi(peers::text(rang->element[i]));
      if (std::find(next.begin(), next.end(), s) == next.end()) next.push_back(s);
    }
    if (!keys.empty()) {
      call[2] = std::to_string(keys.size());
      call.insert(call.begin() + 3, keys.begin(), keys.end());
      (void)peers::command(c, call);
    } else if (!read_any && !next.empty()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // only handlers running: let them
    }
    reading = std::move(next);
  }
}

}  // namespace handoff::bench::shard_prototype
