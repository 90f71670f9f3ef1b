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
//
// Checks: every kill counted once per player; gold and loot conserved (nothing created
// twice by the stalled handler); the stalled handler's write refused; the wait and the
// lease expiry it caused seen in stats(); no key state left.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/thread_pool.hpp>
#if defined(HANDOFF_HAS_PROMETHEUS)
#include <handoff/prometheus.hpp>
#endif

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

struct player {
  std::uint32_t id = 0;
  long xp = 0;
  long gold = 0;
  std::uint32_t kills = 0;
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

class game_server {
 public:
  explicit game_server(std::size_t workers) : pool_(workers) {
    for (std::uint32_t id = 0; id < player_count; ++id) {
      players_.push_back(std::make_unique<handoff::actor<player>>(player{.id = id}));
      rooms_.add_member(room_of(id), id);
    }
  }

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
      auto g = room_locks_.lock(room_key(room), handoff::lease{30ms});
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

  // --- inspection (after the requests are done) -----------------------------------------

  player snapshot(std::uint32_t player_id) {
    return players_[player_id]->ask([](player& p) { return p; }).get();
  }
  const room_store& rooms() const { return rooms_; }
  std::size_t live_room_keys() const { return room_locks_.size(); }
  handoff::keyed_mutex_stats<std::string> room_lock_stats() { return room_locks_.stats(); }
  const handoff::keyed_mutex<>& room_locks() const { return room_locks_; }

 private:
  // Destroyed in reverse order: the pool first (it runs the work still queued, which uses
  // the members above it), then the locks, the store and the players.
  std::vector<std::unique_ptr<handoff::actor<player>>> players_;
  room_store rooms_;
  handoff::keyed_mutex<> room_locks_;
  handoff::thread_pool pool_;
};

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

  // Phase 2: a stalled handler. It reads room 0 under a 30 ms lease and pauses; a healthy
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

  // Every request's messages were posted before `done`/`stalled_done` were counted down,
  // so these asks (sent after) run after them.
  long gold = 0;
  for (std::uint32_t id = 0; id < player_count; ++id) {
    const player p = server.snapshot(id);
    expect(p.kills == kills[id], "every kill reached its player exactly once");
    expect(p.xp == xp_per_kill * p.kills, "xp matches the kills");
    gold += p.gold;
  }
  long kill_count = 0;
  for (std::uint32_t k : kills) kill_count += k;
  expect(gold + server.rooms().total_loot() == loot_per_kill * kill_count + 100 + bonuses,
         "loot is conserved: nothing was paid out twice");
  expect(server.live_room_keys() == 0, "no room keeps lock state once idle");

  std::printf("game_server: %ld kills, %ld gold paid out, %ld loot left in rooms, stale write refused\n", kill_count,
              gold - bonuses, server.rooms().total_loot());
  std::printf("game_server: longest room wait %s, %.1f ms; %llu lock waits in all\n",
              stats.longest_waits.front().key.c_str(),
              std::chrono::duration<double, std::milli>(stats.longest_waits.front().waited).count(),
              static_cast<unsigned long long>(stats.waits));
#if defined(HANDOFF_HAS_PROMETHEUS)
  handoff::set_metrics_sink(nullptr);  // before the exporter (and its sink) go away
#endif
  return 0;
}
