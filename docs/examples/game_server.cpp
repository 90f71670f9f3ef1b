// A game server's request handling, in miniature, checked.
//
//  - Players: one handoff::actor<player> each. Handlers on any thread post small updates
//    (xp, gold) to it: no lock, no waiting, and the updates of one player never overlap.
//  - Rooms: a room's record lives in a store that stands for the database. Operations on a
//    room that span its players (a kill drops loot into the room; a split shares the
//    room's loot among its members) read, modify and write that record while holding the
//    room's key in a handoff::keyed_mutex<>, with a lease so that a stuck handler cannot
//    keep the room forever.
//  - Fencing: every grant has a token, larger than any earlier grant's for the same room.
//    The store remembers the highest token it has seen per room and refuses lower ones, so
//    a handler that stalls past its lease (a GC pause, a page fault storm, a debugger)
//    cannot overwrite the work of the handler that got the room after it.
//  - Request handlers run on a handoff::thread_pool.
//  - Operations: the room locks' stats() name the room that waited longest and count the
//    lease that ran out; with handoff::prometheus built, the same figures are served at
//    http://127.0.0.1:<port>/metrics while the server runs (docs/operations.md).
//  - Sessions on timers: one handoff::timer_service for the server, its batches run on the
//    pool, named once as the default so that handlers schedule through `self`: a player's
//    session has an idle timer (re-armed by each of its messages; it closes the session
//    with a last save) and a fixed-delay autosave; each room ticks at a fixed rate.
//  - Trades between players (an item for gold), from two network threads: one locks both
//    players' keys (try_lock_all_for) around asks and posts to their actors, the other
//    moves the item and the gold by escrow messages between the two actors, no lock.
//
// Checks: every kill counted once per player; gold and loot conserved (nothing created
// twice by the stalled handler); the stalled handler's write refused; the wait and the
// lease expiry it caused seen in stats(); no key state left; gold and items conserved by
// the trades, in the players and in their last saves; every session closed by its idle
// timer; no room ticked early.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer_scope.hpp>
#include <handoff/timer_service.hpp>
#if defined(HANDOFF_HAS_PROMETHEUS)
#include <handoff/prometheus.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "expect.hpp"

using namespace std::chrono_literals;
using example::expect;

namespace {

constexpr std::uint32_t player_count = 8;
constexpr std::uint32_t room_count = 2;
constexpr int request_count = 4000;
constexpr long xp_per_kill = 10;
constexpr long loot_per_kill = 5;
// Long enough that a healthy room operation (microseconds) never outlives it, even under
// a sanitizer on a loaded machine. If one did, fencing would still keep the data right.
constexpr auto room_lease = 1s;
// The stalled handler's: long enough that the healthy split queues behind it before it runs
// out, even when a sanitizer and a loaded machine make the pool slow to start the split.
constexpr auto stalled_lease = 100ms;
constexpr long start_gold = 100;
constexpr int start_items = 20;
constexpr int trades_per_thread = 1000;
// A session closes after this long without a message; short, so the example stays short.
constexpr auto idle_timeout = 150ms;
constexpr auto autosave_period = 20ms;
constexpr auto room_tick = 10ms;

struct player {
  explicit player(std::uint32_t player_id) : id(player_id) {}
  std::uint32_t id = 0;
  long xp = 0;
  long gold = start_gold;
  std::uint32_t kills = 0;
  int items = start_items;
  // The session: online from a message after a quiet spell until its idle timer fires.
  bool online = false;
  handoff::timer idle;      // re-armed by each message of the session
  handoff::timer autosave;  // fixed-delay: the next save a period after the previous one ran
};
// What the checks read of a player (a player holds timers: it is not copied).
struct player_view {
  long xp = 0;
  long gold = 0;
  std::uint32_t kills = 0;
  int items = 0;
};

struct room_clock {
  std::uint64_t ticks = 0;
  handoff::timer tick;
};

// The database players are saved to: the last save of each.
class save_store {
 public:
  void save(const player& p, bool last) {
    std::lock_guard lock(mutex_);
    saved_.at(p.id) = {p.gold, p.items};
    ++(last ? last_saves_ : autosaves_);
  }
  // Setup and checks only.
  void resize(std::size_t players) {
    std::lock_guard lock(mutex_);
    saved_.resize(players);
  }
  std::pair<long, long> totals() const {  // gold, items
    std::lock_guard lock(mutex_);
    long gold = 0;
    long items = 0;
    for (const auto& [g, i] : saved_) {
      gold += g;
      items += i;
    }
    return {gold, items};
  }
  std::uint64_t autosaves() const {
    std::lock_guard lock(mutex_);
    return autosaves_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<long, int>> saved_;
  std::uint64_t autosaves_ = 0;
  std::uint64_t last_saves_ = 0;
};

struct room_record {
  long loot = 0;
  std::vector<std::uint32_t> members;
};

// The database that persists rooms. Every request carries the caller's fencing token; a
// token lower than the highest one this room has seen is refused. Reads for update carry
// it too, so the store learns of a new holder as soon as it reads, before the previous,
// stalled holder's late write can arrive.
class room_store {
 public:
  room_store() : rooms_(room_count) {}

  std::optional<room_record> read_for_update(std::uint32_t room, std::uint64_t token) {
    std::lock_guard lock(mutex_);
    entry& e = rooms_.at(room);
    if (!admit(e, token)) return std::nullopt;
    return e.record;
  }

  bool write(std::uint32_t room, std::uint64_t token, room_record record) {
    std::lock_guard lock(mutex_);
    entry& e = rooms_.at(room);
    if (!admit(e, token)) return false;
    e.record = std::move(record);
    return true;
  }

  // Setup and checks only (no token: nothing else runs then).
  void add_member(std::uint32_t room, std::uint32_t player_id) {
    std::lock_guard lock(mutex_);
    rooms_.at(room).record.members.push_back(player_id);
  }
  long total_loot() const {
    std::lock_guard lock(mutex_);
    long sum = 0;
    for (const entry& e : rooms_) sum += e.record.loot;
    return sum;
  }
  std::uint64_t refused() const {
    std::lock_guard lock(mutex_);
    return refused_;
  }

 private:
  struct entry {
    std::uint64_t highest_token = 0;
    room_record record;
  };
  bool admit(entry& e, std::uint64_t token) {
    if (token < e.highest_token) {
      ++refused_;
      return false;
    }
    e.highest_token = token;
    return true;
  }

  mutable std::mutex mutex_;
  std::vector<entry> rooms_;
  std::uint64_t refused_ = 0;
};

// A request handler runs once on the pool: thread_pool::execute takes any callable. A
// handler that threw would be printed to stderr; here none may, so it fails the example.
template <class F>
void run_on(handoff::thread_pool& pool, F f) {
  pool.execute([f = std::move(f)]() mutable {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "request failed: %s\n", e.what());
      expect(false, "no request handler throws");
    }
  });
}

std::string room_key(std::uint32_t room) { return "room:" + std::to_string(room); }
std::string player_key(std::uint32_t id) { return "player:" + std::to_string(id); }

class game_server {
 public:
  explicit game_server(std::size_t workers) : pool_(workers) {
    saves_.resize(player_count);
    for (std::uint32_t id = 0; id < player_count; ++id) {
      players_.push_back(std::make_unique<handoff::actor<player>>(id));
      rooms_.add_member(room_of(id), id);
    }
    for (std::uint32_t r = 0; r < room_count; ++r)
      room_clocks_.push_back(std::make_unique<handoff::actor<room_clock>>());
    timers_.start(pool_);  // the service's thread waits; each due batch is a job on the pool
    handoff::set_default_timer_service(&timers_);
  }
  ~game_server() { handoff::set_default_timer_service(nullptr); }  // before timers_ goes
  game_server(const game_server&) = delete;
  game_server& operator=(const game_server&) = delete;

  static std::uint32_t room_of(std::uint32_t player_id) { return player_id % room_count; }

  // --- requests (each runs on a pool worker) --------------------------------------------

  void submit_kill(std::uint32_t player_id, std::latch& done) {
    run_on(pool_, [this, player_id, &done] {
      players_[player_id]->post([](player& p) {  // the player's own state: a message, no lock
        p.xp += xp_per_kill;
        ++p.kills;
      });
      drop_loot(room_of(player_id), loot_per_kill);  // the room's: under the room's lock
      done.count_down();
    });
  }

  void submit_split(std::uint32_t room, std::latch& done) {
    run_on(pool_, [this, room, &done] {
      split_loot(room);
      done.count_down();
    });
  }

  // Any thread: a bonus posted straight to the player.
  void grant_bonus(std::uint32_t player_id, long gold) {
    players_[player_id]->post([gold](player& p) { p.gold += gold; });
  }

  // --- room operations -------------------------------------------------------------------

  // Read-modify-write of the room's record. A refusal means our lease ran out and a newer
  // holder has been at the room: nothing was written, so start over with a fresh grant.
  void drop_loot(std::uint32_t room, long amount) {
    for (;;) {
      auto g = room_locks_.lock(room_key(room), handoff::lease{room_lease});
      std::optional<room_record> r = rooms_.read_for_update(room, g.token());
      if (!r) continue;
      r->loot += amount;
      if (rooms_.write(room, g.token(), std::move(*r))) return;
    }
  }

  // Shares the room's loot among its members. Commits to the store first and credits the
  // players only if the store accepted: a refused (stale) split gives nobody anything.
  void split_loot(std::uint32_t room) {
    auto g = room_locks_.lock(room_key(room), handoff::lease{room_lease});
    std::optional<room_record> r = rooms_.read_for_update(room, g.token());
    if (!r || r->members.empty()) return;
    const long share = r->loot / static_cast<long>(r->members.size());
    if (share == 0) return;
    r->loot -= share * static_cast<long>(r->members.size());
    const std::vector<std::uint32_t> members = r->members;
    if (!rooms_.write(room, g.token(), std::move(*r))) return;
    for (std::uint32_t id : members) players_[id]->post([share](player& p) { p.gold += share; });
  }

  // The same split, by a handler that stalls between its read and its write for longer
  // than its lease (has_read: it has read; resume: the pause ends; finished: it is done).
  struct stalled_result {
    bool write_accepted = true;
    bool saw_expired = false;
  };
  void submit_stalled_split(std::uint32_t room, std::latch& has_read, std::latch& resume, std::latch& finished,
                            stalled_result& out) {
    run_on(pool_, [this, room, &has_read, &resume, &finished, &out] {
      auto g = room_locks_.lock(room_key(room), handoff::lease{stalled_lease});
      std::optional<room_record> r = rooms_.read_for_update(room, g.token());
      expect(r.has_value(), "the first holder reads the room");
      g.check();  // still ours here...
      has_read.count_down();
      resume.wait();  // ...then the pause: meanwhile the lease runs out and the room moves on
      const long share = r->loot / static_cast<long>(r->members.size());
      r->loot -= share * static_cast<long>(r->members.size());
      const std::vector<std::uint32_t> members = r->members;
      out.saw_expired = g.expired();
      // A paused handler does not know it was paused: it goes on and writes. The token it
      // carries is what protects the room.
      out.write_accepted = rooms_.write(room, g.token(), std::move(*r));
      if (out.write_accepted) {
        for (std::uint32_t id : members) players_[id]->post([share](player& p) { p.gold += share; });
      }
      g.unlock();  // a no-op: the lease already gave the room away
      finished.count_down();
    });
  }

  // --- sessions and rooms on timers ------------------------------------------------------

  // Every message of a session calls this first, in the player's handler: it opens the
  // session after a quiet spell, or pushes its idle timer out. The timers come from the
  // default service through `self`: no handler carries the service.
  void touch(player& p, handoff::actor<player>& self) {
    if (p.online && p.idle.rearm(idle_timeout)) return;
    p.online = true;
    online_.fetch_add(1);
    p.idle = handoff::after(idle_timeout, self, [this](player& x) { close_session(x); });
    p.autosave = handoff::every(
        autosave_period, self, [this](player& x) { saves_.save(x, false); }, handoff::repeat::fixed_delay);
  }
  void close_session(player& p) {
    p.autosave.cancel();  // same actor: a save already queued does nothing
    saves_.save(p, true);
    p.online = false;
    online_.fetch_sub(1);
  }
  void login_all() {
    for (auto& p : players_) p->post([this](player& x, handoff::actor<player>& self) { touch(x, self); });
  }
  [[nodiscard]] int online() const { return online_.load(); }

  void start_rooms() {
    for (auto& r : room_clocks_) {
      r->post([](room_clock& c, handoff::actor<room_clock>& self) {
        c.tick = handoff::every(room_tick, self, [](room_clock& x) { ++x.ticks; });  // fixed-rate
      });
    }
  }
  // Stops the ticks; the count of each room.
  std::vector<std::uint64_t> stop_rooms() {
    std::vector<std::uint64_t> ticks;
    for (auto& r : room_clocks_) {
      ticks.push_back(r->ask([](room_clock& c) {
                         c.tick.cancel();
                         return c.ticks;
                       }).get());
    }
    return ticks;
  }

  // --- trades: an item for `price` gold, or nothing -----------------------------------------

  // With locks: every message that takes gold or items from a player is sent while holding
  // "player:<id>", so the checks (asks) still hold when the changes (posts) run. False:
  // the two keys were not both free within 100 ms (nothing held, nothing changed).
  bool trade_locked(std::uint32_t seller, std::uint32_t buyer, long price) {
    auto both = player_locks_.try_lock_all_for({player_key(seller), player_key(buyer)}, 100ms);
    if (!both.owns_lock()) return false;
    handoff::actor<player>& s = *players_[seller];
    handoff::actor<player>& b = *players_[buyer];
    const bool can_sell = s.ask([this](player& p, handoff::actor<player>& self) {
                             touch(p, self);
                             return p.items > 0;
                           }).get();
    const bool can_pay = b.ask([this, price](player& p, handoff::actor<player>& self) {
                            touch(p, self);
                            return p.gold >= price;
                          }).get();
    if (can_sell && can_pay) {
      locked_done_.fetch_add(1);
      s.post([this, price](player& p, handoff::actor<player>& self) {
        touch(p, self);
        --p.items;
        p.gold += price;
      });
      b.post([this, price](player& p, handoff::actor<player>& self) {
        touch(p, self);
        ++p.items;
        p.gold -= price;
      });
    }
    return true;
  }

  // By escrow messages, no lock: each step is one handler on one player; in between, the
  // item is in escrow (neither player has it). A buyer who cannot pay sends it back.
  void trade_escrow(std::uint32_t seller, std::uint32_t buyer, long price) {
    handoff::actor<player>& b = *players_[buyer];
    players_[seller]->post([this, &b, price](player& s, handoff::actor<player>& self) {
      touch(s, self);
      if (s.items == 0) return settled(false);
      --s.items;
      b.post([this, &seller = self, price](player& p, handoff::actor<player>& buyer_self) {
        touch(p, buyer_self);
        const bool pays = p.gold >= price;
        if (pays) {
          p.gold -= price;
          ++p.items;
        }
        seller.post([this, pays, price](player& x, handoff::actor<player>& seller_self) {
          touch(x, seller_self);
          if (pays) {
            x.gold += price;
          } else {
            ++x.items;  // the compensation: the item comes back
          }
          settled(pays);
        });
      });
    });
  }
  [[nodiscard]] long escrow_settled() const { return escrow_settled_.load(); }
  [[nodiscard]] long escrow_done() const { return escrow_done_.load(); }
  [[nodiscard]] long locked_done() const { return locked_done_.load(); }

  // --- inspection (after the requests are done) -----------------------------------------

  player_view snapshot(std::uint32_t player_id) {
    return players_[player_id]->ask([](player& p) { return player_view{p.xp, p.gold, p.kills, p.items}; }).get();
  }
  const save_store& saves() const { return saves_; }
  handoff::timer_stats timer_stats() const { return timers_.stats(); }
  const room_store& rooms() const { return rooms_; }
  std::size_t live_room_keys() const { return room_locks_.size(); }
  handoff::keyed_mutex_stats<std::string> room_lock_stats() { return room_locks_.stats(); }
  const handoff::keyed_mutex<>& room_locks() const { return room_locks_; }

 private:
  void settled(bool paid) {
    if (paid) escrow_done_.fetch_add(1);
    escrow_settled_.fetch_add(1);  // after: whoever sees every trade settled sees the counts
  }

  // Destroyed in reverse order: the timers first (their batches run on the pool), then the
  // pool (it runs the work still queued, which uses the members above it), then the locks,
  // the stores and the actors.
  save_store saves_;
  std::vector<std::unique_ptr<handoff::actor<player>>> players_;
  std::vector<std::unique_ptr<handoff::actor<room_clock>>> room_clocks_;
  room_store rooms_;
  handoff::keyed_mutex<> room_locks_;
  handoff::keyed_mutex<> player_locks_;
  std::atomic<int> online_{0};
  std::atomic<long> escrow_settled_{0};
  std::atomic<long> escrow_done_{0};
  std::atomic<long> locked_done_{0};
  handoff::thread_pool pool_;
  handoff::timer_service timers_;
};

// Two different players of `room` (its members are room, room + room_count, ...).
std::pair<std::uint32_t, std::uint32_t> two_players_of(std::uint32_t room, std::mt19937& r) {
  constexpr std::uint32_t members = player_count / room_count;
  const std::uint32_t a = r() % members;
  const std::uint32_t b = (a + 1 + r() % (members - 1)) % members;
  return {room + a * room_count, room + b * room_count};
}

// Waits (polling: the example has nothing to block on) until pred() holds or `limit` passes.
template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

int main() {
#if defined(HANDOFF_HAS_PROMETHEUS)
  // What an operator scrapes: every handoff event of the process, and the room locks'
  // gauges. Port 0 picks a free one; a real server names its own (9464 is customary).
  handoff::prometheus::exporter metrics("127.0.0.1:0");
  handoff::set_metrics_sink(&metrics.sink());
#endif
  game_server server(4);
#if defined(HANDOFF_HAS_PROMETHEUS)
  metrics.watch(server.room_locks(), {{"mutex", "rooms"}});
  std::printf("game_server: metrics at http://127.0.0.1:%d/metrics\n", metrics.port());
#endif

  // Phase 1: a burst of requests on the pool, and bonuses posted from this thread meanwhile.
  std::vector<std::uint32_t> kills(player_count, 0);
  std::mt19937 rng(42);
  std::latch done(request_count);
  for (int i = 0; i < request_count; ++i) {
    if (rng() % 5 != 0) {
      const std::uint32_t p = rng() % player_count;
      ++kills[p];
      server.submit_kill(p, done);
    } else {
      server.submit_split(rng() % room_count, done);
    }
    if (i % 500 == 0) {
      for (std::uint32_t p = 0; p < player_count; ++p) server.grant_bonus(p, 1);
    }
  }
  done.wait();
  const long bonuses = static_cast<long>(player_count) * ((request_count + 499) / 500);

  // Phase 2: a stalled handler. It reads room 0 under a 100 ms lease and pauses; a healthy
  // split queues for the room, gets it when the lease runs out, and commits; then the
  // stalled handler wakes up and writes with its old token.
  server.drop_loot(0, 100);
  (void)server.room_lock_stats();  // a new window for longest_waits: phase 2's waits only
  const std::uint64_t refused_before = server.rooms().refused();
  std::latch has_read(1), resume(1), healthy_done(1), stalled_done(1);
  game_server::stalled_result stalled;
  server.submit_stalled_split(0, has_read, resume, stalled_done, stalled);
  has_read.wait();
  server.submit_split(0, healthy_done);  // waits in the room's queue until the lease runs out
  healthy_done.wait();
  resume.count_down();
  stalled_done.wait();

  expect(stalled.saw_expired, "the stalled handler's guard reports expired()");
  expect(!stalled.write_accepted, "the store refused the stalled handler's write");
  expect(server.rooms().refused() > refused_before, "the refusal was counted by the store");
  // The operator's view of phase 2: room 0 is the hot key, and its lease ran out.
  const auto stats = server.room_lock_stats();
  expect(stats.lease_expiries == 1, "stats() counted the stalled handler's lease expiry");
  expect(!stats.longest_waits.empty() && stats.longest_waits.front().key == room_key(0),
         "stats() names room 0, where the healthy split waited for the lease, as the longest wait");

  // Phase 3: sessions. Every player logs in, the rooms tick, and two network threads trade
  // items for gold, one by locks, one by escrow messages; then the players go quiet and
  // their idle timers close every session with a last save. The two recipes never trade
  // the same players: the locked one's checks hold only while every message that takes
  // from a player holds that player's key, and escrow messages hold none. So room 0's
  // players trade by locks and room 1's by escrow.
  const auto rooms_started = std::chrono::steady_clock::now();
  server.start_rooms();
  server.login_all();
  long locked_busy = 0;
  std::thread locked_trades([&] {
    std::mt19937 r(7);
    for (int i = 0; i < trades_per_thread; ++i) {
      const auto [seller, buyer] = two_players_of(0, r);
      if (!server.trade_locked(seller, buyer, 1 + i % 7)) ++locked_busy;
    }
  });
  std::thread escrow_trades([&] {
    std::mt19937 r(11);
    for (int i = 0; i < trades_per_thread; ++i) {
      const auto [seller, buyer] = two_players_of(1, r);
      server.trade_escrow(seller, buyer, 1 + i % 7);
    }
  });
  locked_trades.join();
  escrow_trades.join();
  expect(wait_for([&] { return server.escrow_settled() == trades_per_thread; }, 30s),
         "every escrow trade settled or was undone");
  expect(server.locked_done() > 0 && server.escrow_done() > 0, "both recipes made trades");
  expect(wait_for([&] { return server.online() == 0; }, 30s), "every session was closed by its idle timer");
  const std::vector<std::uint64_t> ticks = server.stop_rooms();
  const auto rooms_ran = std::chrono::steady_clock::now() - rooms_started;
  for (std::uint64_t t : ticks) {
    expect(t >= 1, "every room ticked");
    expect(t <= static_cast<std::uint64_t>(rooms_ran / room_tick), "no room ticked early");
  }
  const handoff::timer_stats timer_stats = server.timer_stats();
  expect(server.saves().autosaves() > 0, "sessions were autosaved while they lasted");

  // Every request's messages were posted before `done`/`stalled_done` were counted down,
  // and the trades settled, so these asks (sent after) run after them.
  long gold = 0;
  long items = 0;
  for (std::uint32_t id = 0; id < player_count; ++id) {
    const player_view p = server.snapshot(id);
    expect(p.kills == kills[id], "every kill reached its player exactly once");
    expect(p.xp == xp_per_kill * p.kills, "xp matches the kills");
    expect(p.gold >= 0 && p.items >= 0, "no trade took a player below zero");
    gold += p.gold;
    items += p.items;
  }
  long kill_count = 0;
  for (std::uint32_t k : kills) kill_count += k;
  const long start_gold_all = start_gold * static_cast<long>(player_count);
  expect(gold + server.rooms().total_loot() == loot_per_kill * kill_count + 100 + bonuses + start_gold_all,
         "gold and loot are conserved: nothing was paid out twice, no trade made or lost gold");
  expect(items == start_items * static_cast<long>(player_count), "items are conserved by the trades");
  expect(server.saves().totals() == std::pair<long, long>{gold, items}, "the last saves hold what the players hold");
  expect(server.live_room_keys() == 0, "no room keeps lock state once idle");

  std::printf("game_server: %ld kills, %ld gold paid out, %ld loot left in rooms, stale write refused\n", kill_count,
              gold - bonuses - start_gold_all, server.rooms().total_loot());
  std::printf(
      "game_server: %ld trades by locks, %ld by escrow (of %d tries each; %ld found a player busy), room ticks %llu "
      "and %llu, %llu autosaves\n",
      server.locked_done(), server.escrow_done(), trades_per_thread, locked_busy,
      static_cast<unsigned long long>(ticks[0]), static_cast<unsigned long long>(ticks[1]),
      static_cast<unsigned long long>(server.saves().autosaves()));
  std::printf("game_server: timer lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms over %llu sends\n",
              std::chrono::duration<double, std::milli>(timer_stats.lateness.p50).count(),
              std::chrono::duration<double, std::milli>(timer_stats.lateness.p99).count(),
              std::chrono::duration<double, std::milli>(timer_stats.lateness.max).count(),
              static_cast<unsigned long long>(timer_stats.lateness.count));
  std::printf("game_server: longest room wait %s, %.1f ms; %llu lock waits in all\n",
              stats.longest_waits.front().key.c_str(),
              std::chrono::duration<double, std::milli>(stats.longest_waits.front().waited).count(),
              static_cast<unsigned long long>(stats.waits));
#if defined(HANDOFF_HAS_PROMETHEUS)
  handoff::set_metrics_sink(nullptr);  // before the exporter (and its sink) go away
#endif
  return 0;
}
