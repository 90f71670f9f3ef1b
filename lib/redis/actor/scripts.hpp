// The Lua scripts of handoff::redis::actor_system (private to lib/redis): each protocol step
// is one script, so that what it reads and what it writes are atomic on the server.
//
// Per actor key K (on one server, common/names.hpp: prefix + "{" + escaped K + "}:" + kind):
//   actor:mailbox  list of messages, oldest first; one element is "<id> <body bytes>". Its
//                  length is the actor's message count: messages posted and not yet
//                  dequeued by an owner (an owner dequeues a message after its handler)
//   actor:owner    the owner's token, with a PX lease; absent: nobody owns the actor. An
//                  owner exists only while the mailbox holds a message: it releases the
//                  actor in the step that empties the mailbox
//   actor:delivered  hash id -> n: how often each message handed to an owner and not yet
//                  dequeued was delivered (a batch counts each message it peeked, so
//                  after a crash mid-batch every message the dead owner peeked is flagged)
//   actor:dead     list of dead letters, in the mailbox's element format
//   actor:state    hash {id, value}: the last message whose handling was committed with
//                  its dequeue, and the state committed with it (remember_handled only)
//   actor:held     list of delayed message ids due while the mailbox was full, in due
//                  order (their records stay in actors:delayed:body); gone once they moved
// An idle actor keeps no key (its state and dead letters aside).
// One key per prefix, prefix + "actors:pending": a sorted set of the actor keys (raw bytes)
// that have messages, scored by the server time in ms after which a sweeper looks at them
// (0, at once, for a new owner's actor and an announced one; the owner's lease end once
// a sweep or a renewal has seen the owner live). Beside it the delayed messages (posted to
// run at or after a time), which no actor holds until they are due:
//   actors:delayed        sorted set of message ids, scored by the server time in ms from
//                         which the message is due
//   actors:delayed:body   hash id -> "<m> <k> <mailbox name><actor key><element>", m and k
//                         the byte lengths of the two names: what moving it needs
// A sweep moves the due ones to the tails of their mailboxes (a post each, announcing an
// actor it takes from empty to one message), in the script that reads the pending set
// (delayed_scripts.hpp).
// On a Redis Cluster every script must touch one hash slot, so the actors are split into
// 256 slot groups (layout.hpp): K's names are prefix + "{" + G + "}:" + escaped K +
// ":actor:" + kind, and its group's pending set is prefix + "{" + G + "}:actors:pending"
// (its delayed messages' likewise), where G is the slot tag of the group of the slot K's
// escaped key hashes to.
//
// The hand-off, as in the in-process actor, with the mailbox's length as the count: a
// post appends its message, and the post whose append takes the length from 0 to 1
// becomes the owner (a post queued behind an owner makes one redis.call). The owner
// steps: dequeue the messages it handled (the head of the mailbox, in order), then peek
// the next batch (each message's delivery count + 1) or, with the mailbox empty, release.
// A budget step keeps the actor owned (for the process's executor) or announces it. An
// actor whose owner's lease ran out, or that was announced, is taken over by a sweeper
// (claim), never by a post: its pending entry comes due. Because the append is the
// increment, the in-process drainer's window (counted, not yet enqueued) does not exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../common/lua.hpp"
#include "layout.hpp"

namespace handoff::redis::detail::actor_scripts {

// Helpers of every actor script, after lua::now_ms (see source()), which only the steps
// that need the server clock call (a post reads no clock): the id of an element
// ("<id> <body>"); due(), which makes the actor due for a sweep in the pending set when a
// lease of `lease` ms from now ends; and own(), the one place that gives an owner its
// lease: the owner key holds `token` for `lease` ms, and due() (the post's SET NX is own()
// in one call with the check that nobody owns the actor).
// Redis turns every argument, every value a redis.call returns and every number a script
// formats or parses into a Lua or Redis object of its own, each costing the server more
// than the script's own work on it (docs/design.md, "Redis actors: what a message costs
// the server"): the scripts take the arguments the common paths need first (the
// rest only when used), pass numbers the server only forwards as strings, and read no
// more of the mailbox than they use.
inline constexpr const char* prelude = R"lua(
local function id_of(m) return string.sub(m, 1, string.find(m, ' ', 1, true) - 1) end
local function due(pending, actor, lease)
  redis.call('ZADD', pending, now_ms() + tonumber(lease), actor)
end
local function own(owner, pending, actor, token, lease)
  redis.call('SET', owner, token, 'PX', lease)
  due(pending, actor, lease)
end
)lua";

// KEYS: mailbox, owner, pending, delivered, state. ARGV: element, mailbox bound ('': none),
// what the caller does if its post wins the actor ('q': it may not own it, announce it;
// 'o': own it and drain later; 'd': own it and drain at once, its message, the only one,
// delivered by this reply; 's': as 'd', and read the state), lease ms, the actor key. The
// owner's token is the message's id.
// -1: the mailbox is full (nothing changed); 0: queued behind an owner (or announced);
// 1: queued, and the caller owns the actor now; {2, state id, state value}: the caller
// owns the actor and its message is the head, delivered for the first time.
// A post queued behind an owner makes one redis.call (RPUSH), an idle actor's four (RPUSH,
// SET NX, ZADD, HSET). The new owner's pending entry is due at once (score 0), not at its
// lease's end, so that the post reads no clock: a sweep that comes first finds the owner
// live and moves the entry to the lease's end (claim); most owners release before that.
inline constexpr const char* post = R"lua(
local len = redis.call('RPUSH', KEYS[1], ARGV[1])
if len > 1 then
  if ARGV[2] ~= '' and len > tonumber(ARGV[2]) then
    -- Full: take it back (cheaper than reading the length first on every post).
    redis.call('RPOP', KEYS[1])
    return -1
  end
  return 0
end
-- The 0 -> 1 hand-off: the mailbox was empty, so nobody owned the actor.
if ARGV[3] == 'q' then
  redis.call('ZADD', KEYS[3], '0', ARGV[5])  -- for a sweeper of a process that has the handler
  return 0
end
local token = id_of(ARGV[1])
-- NX: a stale owner (its mailbox emptied by hand) keeps the actor until its lease ends.
if not redis.call('SET', KEYS[2], token, 'NX', 'PX', ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[3], '0', ARGV[5])
if ARGV[3] == 'o' then return 1 end
redis.call('HSET', KEYS[4], token, '1')
if ARGV[3] ~= 's' then return {2, '', ''} end
local s = redis.call('HMGET', KEYS[5], 'id', 'value')
return {2, s[1] or '', s[2] or ''}
)lua";

// KEYS: mailbox, owner, delivered, pending, dead, state. ARGV: token, lease ms, handled (k:
// the messages at the head whose handlers returned, to dequeue), the first and the last
// of their ids, mode ('next', 'keep' or 'announce'), max attempts, the actor key, the
// batch size - 1 (the last index to peek); then, only when used: where the peeked
// messages that never ran start after the dequeue and how many there are (their delivery
// is taken back: the budget ran out, or a handler before them threw), '1' to record the
// last handled id in state, '1' to store the next argument as the state value, the value.
// Replies {status, dead letters made}: -1 the token is not the owner's (nothing changed);
// 0 released; 2 handed on ('keep': still owned, lease renewed; 'announce': owner deleted,
// sweepers see it now); 1 messages to handle, followed by the state's id and value (empty
// without remember_handled), then each message's element and delivery count, in order.
// A peek leaves the lease as it is: the owner's process renews it while it drains (the
// renewer, upkeep.hpp), so a busy actor's steps make no clock read and no write of
// the owner or the pending set.
// The step that dequeues an idle actor's one message and releases it makes four
// redis.calls (GET, LRANGE, DEL, ZREM): it reads the handled messages and the next batch
// in one LRANGE, and finding no more deletes the mailbox with the owner and the delivery
// counts. A busy actor's step makes six (GET, LRANGE, LPOP or LTRIM, HDEL, then HMGET and
// HSET: the batch's delivery counts read and written with one call each).
inline constexpr const char* step = R"lua(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {-1, 0} end
local unrun = ARGV[10] and tonumber(ARGV[11]) or 0
local function commit_state()
  if ARGV[12] == '1' then
    redis.call('HSET', KEYS[6], 'id', ARGV[5])
    if ARGV[13] == '1' then redis.call('HSET', KEYS[6], 'value', ARGV[14]) end
  end
end
local function release()
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[8])
end
local peek = ARGV[6] == 'next'
local last = peek and ARGV[9] or '0'
local batch = nil  -- the head of the mailbox, when read with the dequeue
if ARGV[3] ~= '0' then
  local k = tonumber(ARGV[3])
  -- The handled ones and what follows them: the next batch (one message if not peeking).
  local got = redis.call('LRANGE', KEYS[1], '0', k + tonumber(last))
  if #got >= k and id_of(got[1]) == ARGV[4] and id_of(got[k]) == ARGV[5] then
    commit_state()
    if #got == k then
      release()  -- the mailbox held only the handled messages: the count is 0
      return {0, 0}
    end
    if k == 1 then redis.call('LPOP', KEYS[1]) else redis.call('LTRIM', KEYS[1], ARGV[3], '-1') end
    local ids = {}
    for i = 1, k do ids[i] = id_of(got[i]) end
    redis.call('HDEL', KEYS[3], unpack(ids))
    batch = {}
    for i = k + 1, #got do batch[i - k] = got[i] end
  else
    unrun = 0  -- not the messages this owner peeked: leave every count as it is
  end
end
if unrun > 0 then
  local from = tonumber(ARGV[10])
  for _, m in ipairs(redis.call('LRANGE', KEYS[1], from, from + unrun - 1)) do
    local id = id_of(m)
    if redis.call('HINCRBY', KEYS[3], id, -1) <= 0 then redis.call('HDEL', KEYS[3], id) end
  end
end
local max = tonumber(ARGV[7])
local dead = 0
while true do
  if not batch then batch = redis.call('LRANGE', KEYS[1], '0', last) end
  if #batch == 0 then
    release()
    return {0, dead}
  end
  if not peek then
    if ARGV[6] == 'announce' then
      redis.call('DEL', KEYS[2])
      redis.call('ZADD', KEYS[4], '0', ARGV[8])
    else
      own(KEYS[2], KEYS[4], ARGV[8], ARGV[1], ARGV[2])
    end
    return {2, dead}
  end
  local peeked = {}
  for i, m in ipairs(batch) do peeked[i] = id_of(m) end
  local counts = redis.call('HMGET', KEYS[3], unpack(peeked))
  if (tonumber(counts[1]) or 0) < max then
    -- The lease is not renewed here: the owner's process renews it while it drains.
    local out = {1, dead, '', ''}
    if ARGV[12] == '1' then
      local s = redis.call('HMGET', KEYS[6], 'id', 'value')
      out[3] = s[1] or ''
      out[4] = s[2] or ''
    end
    local set = {}
    -- The batch stops before a message due for the dead letters: it goes there when it
    -- reaches the head.
    for i, m in ipairs(batch) do
      local c = (tonumber(counts[i]) or 0) + 1
      if c > max then break end
      out[#out + 1] = m
      out[#out + 1] = c
      set[#set + 1] = peeked[i]
      set[#set + 1] = c
    end
    redis.call('HSET', KEYS[3], unpack(set))
    return out
  end
  redis.call('LPOP', KEYS[1])
  redis.call('RPUSH', KEYS[5], batch[1])
  redis.call('HDEL', KEYS[3], peeked[1])
  dead = dead + 1
  batch = nil
end
)lua";

// KEYS: owner, pending. ARGV: token, lease ms, the actor key. 1 if renewed, 0 if the
// token is not the owner's.
inline constexpr const char* renew = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
own(KEYS[1], KEYS[2], ARGV[3], ARGV[1], ARGV[2])
return 1
)lua";

// KEYS: mailbox, owner, pending. ARGV: token, lease ms, the actor key. Takes over an
// actor with messages and no live owner: 1. Otherwise 0, after rescheduling the sweep to
// the live owner's lease end, or forgetting an actor with an empty mailbox.
inline constexpr const char* claim = R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl < 0 then ttl = tonumber(ARGV[2]) end
  redis.call('ZADD', KEYS[3], now_ms() + ttl, ARGV[3])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[3], ARGV[3])
  return 0
end
own(KEYS[2], KEYS[3], ARGV[3], ARGV[1], ARGV[2])
return 1
)lua";

// The step script's arguments, named; call() lays them out in the script's order (above).
struct step_args {
  std::string_view token, lease_px;
  std::size_t handled = 0;             // k: the messages at the head to dequeue
  std::string_view first_id, last_id;  // theirs
  std::string_view mode;               // "next", "keep" or "announce"
  std::string_view attempts;           // max attempts, as sent
  std::uint32_t batch = 1;             // the most messages to peek
  // Sent only when used: the peeked messages that never ran (after the one that threw,
  // if one did), and the state (remember_handled).
  std::size_t unrun = 0;
  bool threw = false;
  bool remember_handled = false;
  bool has_state = false;
  std::string_view state;

  [[nodiscard]] std::vector<std::string> call(const actor_names& n) const {
    std::vector<std::string> c{"6",
                               n.mailbox,
                               n.owner,
                               n.delivered,
                               n.pending,
                               n.dead,
                               n.state,
                               std::string(token),
                               std::string(lease_px),
                               std::to_string(handled),
                               std::string(first_id),
                               std::string(last_id),
                               std::string(mode),
                               std::string(attempts),
                               n.key,
                               std::to_string(batch == 0 ? 0 : batch - 1)};
    if (unrun != 0 || remember_handled) {
      c.insert(c.end(), {threw ? "1" : "0", std::to_string(unrun)});
      if (remember_handled) c.insert(c.end(), {"1", has_state ? "1" : "0", std::string(state)});
    }
    return c;
  }
};

// A script's source as loaded: the shared snippets, then `body` (one of the above).
inline std::string source(std::string_view body) { return lua::source({lua::now_ms, prelude, body}); }

}  // namespace handoff::redis::detail::actor_scripts
