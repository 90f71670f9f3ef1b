// The code of docs/keyed_mutex.md, compiled and checked.
//
// Every block the guide quotes sits between `// [snippet:NAME]` and `// [/snippet]`, and
// the guide's copy is compared with it by the `example_docs_snippets` test
// (check_snippets.py). Edit a snippet here first, then paste it into the guide.
//
// main() runs each snippet and checks what the guide says about it; a failed check exits
// with status 1.
#include <handoff/keyed_mutex.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "expect.hpp"

using namespace std::chrono_literals;
using example::expect;

namespace {

struct player {
  long gold = 0;
  int potions = 0;
};
// Built before the threads start and never resized while they run: looking players up
// concurrently is safe, and each player's fields are guarded by the player's key.
using player_table = std::unordered_map<std::string, player>;

struct room {
  std::string name;
};
using room_table = std::unordered_map<std::string, room>;

// --- per-key locking ---------------------------------------------------------------------

// [snippet:per_player]
void add_gold(handoff::keyed_mutex<>& locks, player_table& players, const std::string& id, long n) {
  auto g = locks.lock("player:" + id);  // blocks until granted; waiters on one key are served FIFO
  players.at(id).gold += n;             // only the holder of "player:<id>" touches this player
}  // ~key_guard unlocks: the next waiter gets the key
// [/snippet]

// [snippet:with_lock]
long gold_of(handoff::keyed_mutex<>& locks, player_table& players, const std::string& id) {
  return locks.with_lock("player:" + id, [&] { return players.at(id).gold; });
}
// [/snippet]

// [snippet:try_lock]
// Matchmaking: take the first candidate nobody is busy with, and never wait for one.
std::optional<std::string> pick_idle(handoff::keyed_mutex<>& locks, const std::vector<std::string>& candidates,
                                     handoff::key_guard& held) {
  for (const std::string& id : candidates) {
    if (auto g = locks.try_lock("player:" + id)) {  // fails at once while anyone holds the key
      held = std::move(g);                          // keep the player locked for the match setup
      return id;
    }
  }
  return std::nullopt;
}
// [/snippet]

// [snippet:try_lock_for]
enum class outcome { done, busy };

outcome rename_room(handoff::keyed_mutex<>& locks, room_table& rooms, const std::string& id, std::string name) {
  auto g = locks.try_lock_for("room:" + id, 50ms);  // waits in the key's FIFO queue, 50 ms at most
  if (!g.owns_lock()) return outcome::busy;         // timed out: it left the queue, never granted
  rooms.at(id).name = std::move(name);
  return outcome::done;
}
// [/snippet]

// --- leases and fencing tokens -----------------------------------------------------------

// [snippet:fenced_store]
// The downstream store (a database row, a file, another service) remembers the highest
// token it has seen per room and refuses requests that carry a lower one.
class room_store {
 public:
  bool append(const std::string& room, std::uint64_t token, const std::string& line) {
    std::lock_guard lock(mutex_);
    room_log& r = rooms_[room];
    if (token < r.highest_token) return false;  // a later holder has been here: stale
    r.highest_token = token;
    r.lines.push_back(line);
    return true;
  }
  std::vector<std::string> lines(const std::string& room) const {
    std::lock_guard lock(mutex_);
    auto it = rooms_.find(room);
    return it == rooms_.end() ? std::vector<std::string>{} : it->second.lines;
  }

 private:
  struct room_log {
    std::uint64_t highest_token = 0;
    std::vector<std::string> lines;
  };
  mutable std::mutex mutex_;
  std::map<std::string, room_log> rooms_;
};
// [/snippet]

// [snippet:lease]
// End-of-match settlement: one store write per result. The lease bounds how long a
// holder that hangs (a stuck call, a paused process) keeps everyone else out of the room.
bool settle_match(handoff::keyed_mutex<>& locks, room_store& store, const std::string& room,
                  const std::vector<std::string>& results) {
  auto g = locks.lock("room:" + room, handoff::lease{2s});  // released by the mutex 2 s after the grant
  for (const std::string& r : results) {
    g.check();                                            // throws handoff::lock_expired once it ran out
    if (!store.append(room, g.token(), r)) return false;  // fenced: a stale holder is refused
    g.extend(2s);                                         // renew: 2 s from now (false if it ran out)
  }
  return true;
}
// [/snippet]

void paused_holder_is_fenced(handoff::keyed_mutex<>& locks, room_store& store) {
  // [snippet:lease_expiry]
  auto slow = locks.lock("room:9", handoff::lease{20ms});
  const std::uint64_t slow_token = slow.token();
  std::thread other([&] {
    auto g = locks.lock("room:9");  // queued behind `slow`: granted when its lease runs out
    expect(g.token() > slow_token, "a later grant carries a larger token");
    expect(store.append("9", g.token(), "other"), "the new holder's write is accepted");
  });
  other.join();  // meanwhile `slow` is paused: GC, swapping, a debugger...
  expect(slow.expired() && !slow.owns_lock(), "the paused holder no longer holds the key");
  bool threw = false;
  try {
    slow.check();
  } catch (const handoff::lock_expired&) {
    threw = true;  // the holder learns it lost the key, if it asks
  }
  expect(threw, "check() throws lock_expired");
  expect(!slow.extend(20ms), "extend() cannot revive an expired lease");
  expect(!store.append("9", slow_token, "slow"), "the store refuses the stale token");
  slow.unlock();  // a no-op: the key is not this guard's to release any more
  // [/snippet]
  expect(slow.token() == slow_token, "the token is kept after expiry");
  expect(store.lines("9") == std::vector<std::string>{"other"}, "only the live holder's write landed");
}

// --- several keys ------------------------------------------------------------------------

// [snippet:lock_all]
// A sells a potion to B. Two trades in opposite directions cannot deadlock: lock_all
// sorts the keys with operator< and locks them one at a time in that order.
bool trade(handoff::keyed_mutex<>& locks, player_table& players, const std::string& seller, const std::string& buyer,
           long price) {
  auto both = locks.lock_all({"player:" + seller, "player:" + buyer});  // seller == buyer: one lock
  player& s = players.at(seller);
  player& b = players.at(buyer);
  if (s.potions == 0 || b.gold < price) return false;
  --s.potions;
  ++b.potions;
  b.gold -= price;
  s.gold += price;
  return true;
}
// [/snippet]

// --- waiting without a thread ------------------------------------------------------------

// [snippet:task]
// The smallest coroutine type that can co_await: it starts at once and frees itself when
// it finishes. Nothing destroys it while it is suspended (see "What is not promised").
struct task {
  struct promise_type {
    task get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};
// [/snippet]

// [snippet:async_lock]
task add_gold_async(handoff::keyed_mutex<>& locks, player_table& players, std::string id, long n,
                    std::vector<std::string>& log) {
  auto g = co_await locks.async_lock("player:" + id);  // suspends while the key is held; no thread blocks
  players.at(id).gold += n;
  log.push_back(id + " +" + std::to_string(n));  // (this example's log is guarded by the key too)
}  // g unlocks here: the next coroutine waiting for the key may resume on this thread
// [/snippet]

// [snippet:async_lock_timeout]
task try_join(handoff::keyed_mutex<>& locks, std::string room, std::promise<bool> joined) {
  auto g = co_await locks.async_lock("room:" + room, 20ms);  // gives up after 20 ms
  joined.set_value(g.owns_lock());  // false if it timed out: then the completion thread resumed it
}
// [/snippet]

// --- checks ------------------------------------------------------------------------------

void check_per_player(handoff::keyed_mutex<>& locks) {
  player_table players{{"1", {}}, {"2", {}}, {"3", {}}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) add_gold(locks, players, std::to_string(1 + (i + t) % 3), 1);
    });
  }
  for (auto& th : threads) th.join();
  long total = 0;
  for (const char* id : {"1", "2", "3"}) total += gold_of(locks, players, id);
  expect(total == 4000, "every add_gold landed exactly once");
  expect(locks.size() == 0, "no key keeps state once its guards are gone");
}

void check_try_lock(handoff::keyed_mutex<>& locks) {
  player_table players{{"7", {}}, {"8", {}}};
  auto busy = locks.lock("player:7");
  handoff::key_guard held;
  const auto picked = pick_idle(locks, {"7", "8"}, held);
  expect(picked == std::optional<std::string>("8"), "try_lock skips the busy player");
  expect(held.owns_lock(), "the picked player stays locked");
  expect(!locks.try_lock("player:7").owns_lock(), "try_lock on a held key returns a guard that owns nothing");
  held.unlock();
  busy.unlock();

  room_table rooms{{"7", {"lobby"}}};
  {
    auto g = locks.lock("room:7");
    outcome r{};
    std::thread other([&] { r = rename_room(locks, rooms, "7", "arena"); });  // another thread: see not_reentrant
    other.join();
    expect(r == outcome::busy, "try_lock_for gives up while the room stays held");
  }
  expect(rename_room(locks, rooms, "7", "arena") == outcome::done, "try_lock_for gets a free room");
  expect(rooms.at("7").name == "arena", "the rename happened");
}

void check_leases(handoff::keyed_mutex<>& locks) {
  room_store store;
  expect(settle_match(locks, store, "5", {"alice 3", "bob 1"}), "settlement under a live lease succeeds");
  expect(store.lines("5").size() == 2, "both results were stored");

  // An extend() after unlock changes nothing.
  auto g = locks.lock("room:6", handoff::lease{2s});
  expect(g.extend(1s), "extend renews a live lease");
  expect(g.lease_duration() == 1s, "the lease is now 1 s");
  g.unlock();
  expect(!g.extend(1s), "extend fails once the guard let go");

  paused_holder_is_fenced(locks, store);
  expect(locks.size() == 0, "the expired guard's state went with its unlock");
}

void check_lease_service() {
  // [snippet:lease_service]
  handoff::timer_service timers;
  timers.start();
  handoff::keyed_mutex<> locks({.timers = &timers});  // destroy it before `timers`
  // [/snippet]
  auto g = locks.lock("room:7", handoff::lease{5ms});
  while (!g.expired()) std::this_thread::sleep_for(1ms);
  expect(timers.stats().sent >= 1, "the lease expired on the program's service");
}

void check_lock_all(handoff::keyed_mutex<>& locks) {
  player_table players{{"a", {1000, 500}}, {"b", {1000, 500}}};
  expect(trade(locks, players, "a", "a", 2), "a trade with oneself locks the key once (and changes nothing)");
  std::thread ab([&] {
    for (int i = 0; i < 2000; ++i) trade(locks, players, "a", "b", 2);
  });
  std::thread ba([&] {
    for (int i = 0; i < 2000; ++i) trade(locks, players, "b", "a", 2);
  });
  ab.join();
  ba.join();
  const player& a = players.at("a");
  const player& b = players.at("b");
  expect(a.gold + b.gold == 2000 && a.potions + b.potions == 1000, "trades conserve gold and potions");
  expect(a.gold == 1000 + 2 * (500 - a.potions), "each potion moved for its price");

  auto all = locks.lock_all({"player:b", "player:a", "player:b"});
  expect(all.size() == 2 && all.owns_lock(), "lock_all deduplicates");
}

void check_coroutines(handoff::keyed_mutex<>& locks) {
  player_table players{{"42", {}}};
  std::vector<std::string> log;
  const auto main_thread = std::this_thread::get_id();
  std::thread::id resumed_on;
  {
    auto g = locks.lock("player:42");
    add_gold_async(locks, players, "42", 1, log);  // each suspends: the key is held
    add_gold_async(locks, players, "42", 2, log);
    add_gold_async(locks, players, "42", 3, log);
    expect(log.empty(), "the coroutines wait while the key is held");
    locks.lock_async("player:42", [&](handoff::key_guard cb) {
      log.push_back("callback, token " + std::to_string(cb.token()));
      resumed_on = std::this_thread::get_id();
    });
  }  // unlocking here resumes the coroutines, then the callback, one after the other
  expect(log.size() == 4 && log[0] == "42 +1" && log[1] == "42 +2" && log[2] == "42 +3",
         "waiters resume in FIFO order");
  expect(resumed_on == main_thread, "they ran on the unlocking thread, inside the unlock");
  expect(players.at("42").gold == 6, "all three additions happened");

  // The callback runs at once when the key is free.
  bool ran_now = false;
  // [snippet:lock_async]
  locks.lock_async("player:42", [&](handoff::key_guard g) {
    // Called once the key is granted: right here, before lock_async returns, if the key is
    // free; otherwise on the thread that hands the key over. g holds the key until it is
    // destroyed, or moved out to keep the key after this call returns.
    ran_now = g.owns_lock();
  });
  // [/snippet]
  expect(ran_now, "lock_async on a free key calls back at once");

  // A wait time: resumed by the completion thread, without the key.
  auto g = locks.lock("room:3");
  std::promise<bool> joined;
  auto result = joined.get_future();
  try_join(locks, "3", std::move(joined));
  expect(!result.get(), "async_lock with a wait time gives up while the key stays held");
  g.unlock();
}

void check_not_reentrant(handoff::keyed_mutex<>& locks) {
  bool threw = false;
  // [snippet:not_reentrant]
  auto g = locks.lock("player:42");
  try {
    auto again = locks.lock("player:42");  // the same thread: it would wait for itself forever
  } catch (const std::system_error& e) {
    threw = e.code() == std::errc::resource_deadlock_would_occur;
  }
  // [/snippet]
  expect(threw, "relocking a held key on the same thread throws resource_deadlock_would_occur");
  expect(g.owns_lock(), "the first guard still holds the key");
}

void check_memory() {
  // [snippet:size]
  handoff::keyed_mutex<std::uint64_t> by_id;  // integer keys: no string to build per lock
  {
    auto g = by_id.lock(42);
    expect(by_id.size() == 1, "a held key has state");
  }
  for (std::uint64_t id = 0; id < 100'000; ++id) by_id.lock(id).unlock();
  expect(by_id.size() == 0, "released keys are neither held nor waited for");
  // [/snippet]
}

}  // namespace

int main() {
  handoff::keyed_mutex<> locks;
  check_per_player(locks);
  check_try_lock(locks);
  check_leases(locks);
  check_lease_service();
  check_lock_all(locks);
  check_coroutines(locks);
  check_not_reentrant(locks);
  check_memory();
  expect(locks.size() == 0, "every key's state is gone at the end");
  std::puts("keyed_mutex_guide: all checks passed");
  return 0;
}
