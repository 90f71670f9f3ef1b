// A process's ownership of shards of one handler family (private to lib/redis): it takes
// shards (shard_store::take), reads their queues in order, runs the entries per key on the
// in-process dispatcher (shard_dispatch: one key's entries one at a time, keys side by
// side on the executor), acknowledges what finished and renews its leases, each in one
// round trip per shard or per server.
//
// The owner's jobs, each in its own function of round():
//   renewal      every third of the lease, all held leases in one round trip per server
//                (renew(), from round() or from a thread of its own); a shard whose lease
//                is no longer the token is lost: its entries not started do not run here
//                (they count as handled, which its fenced acknowledgement refuses, and run
//                under the next owner), and the next round drops it; a handler running then
//                may still finish, which is why a handler must return within the lease
//   acknowledge  per shard, what finished since the last round: the queue's head trimmed
//                up to the first unfinished entry, the ids finished past it put in the done
//                set, states and dead letters written, all in the epoch-checked script;
//                refused: the shard is lost
//   read         per shard, the entries after the last one read, up to the dispatcher's
//                room (a bound on entries read and not finished, over all shards), each
//                with its delivery (shard_takeover::delivery): past max_attempts, a dead
//                letter without running; in the done set (finished under an earlier owner,
//                past a slow key), finished without running
//   recovery     a takeover reads from the queue's head: what the last owner did not
//                acknowledge runs again, in order, flagged by its delivery count
// Not thread-safe, but for renew(): one thread calls take(), round(), drain() and
// release_all(); handlers run on the dispatcher's side (the executor, or that thread
// without one). renew() may run on a thread of its own, so that handlers run inline do not
// hold the leases back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "handoff/executor.hpp"
#include "handoff/redis/actor_system.hpp"
#include "shard_dispatch.hpp"
#include "shard_store.hpp"

namespace handoff::redis::detail {

struct shard_owner_settings {
  std::string prefix;                 // options::prefix
  std::string family;                 // the handler family the shards belong to
  std::uint32_t shards = 256;         // the prefix's shard count
  std::string owner_id;               // this process's id (in its tokens)
  std::int64_t lease_ms = 5000;       // a shard's lease, renewed every third of it
  std::uint32_t read_batch = 64;      // entries read per shard and round, at most
  std::size_t max_unfinished = 1024;  // entries read and not finished, all shards together
  std::uint32_t max_attempts = 5;     // deliveries before a message is dead-lettered
  executor_ref executor{};            // where handlers run (empty: the owner's thread)
};

class shard_owner {
 public:
  using handler = std::function<void(delivery&)>;
  // on_error: a handler's exception, a lost shard, a malformed entry (the key, or "").
  using error_hook = std::function<void(std::string_view key, std::exception_ptr e)>;

  shard_owner(shard_store& store, shard_owner_settings s, handler h, error_hook on_error);
  // Waits for the handlers running (see release_all; the shards are not released: a
  // destroyed owner's shards pass on after their lease, as a crashed one's do).
  ~shard_owner();
  shard_owner(const shard_owner&) = delete;
  shard_owner& operator=(const shard_owner&) = delete;

  // Takes shard `index` if nobody holds it: true, and its queue is read from the head from
  // the next round on. Throws error.
  bool take(std::uint32_t index);
  // Thread-safe. Renews the held leases if a third of the lease passed since the last
  // renewal (at `now_ms`, steady clock); marks the shards it finds lost (above). Throws
  // error (the leases not renewed run out, and the shards are lost then).
  void renew(std::int64_t now_ms);
  // One pass of the jobs above, at `now_ms` (steady clock, for the renewal). Returns the
  // entries it dispatched and acknowledged (0: nothing to do now). Throws error for a
  // Redis failure (the caller retries later; leases not renewed run out).
  std::size_t round(std::int64_t now_ms);
  // Stops reading, waits until every dispatched entry finished, acknowledges them and
  // releases every shard cleanly. Throws error.
  void release_all();
  // The hand-off in which a post that takes its shard from empty to one entry takes the
  // shard and drains it on its own thread: rounds until every held shard's queue is read,
  // run and acknowledged, then releases each only while its queue is still empty. A post
  // that comes before that release finds the shard owned and leaves its entry to this
  // owner, which goes on; one that comes after finds it free and empty, and takes it. So
  // no entry is left without an owner, unless a poster dies between its post and its take
  // (then a sweeper's take finds it). Returns when no shard is held. Throws error (the
  // shards held then pass on after their lease).
  void drain();
  // The shards held now.
  [[nodiscard]] std::vector<std::uint32_t> owned() const;

 private:
  // What renew() needs of a held shard: shared with its thread, never changed.
  struct lease_ref {
    std::uint32_t index;
    shard_names names;
    std::string token;
  };
  struct held_shard {
    held_shard(const shard_owner_settings& s, std::uint32_t i, shard_takeover t)
        : index(i), names(s.prefix, s.family, i), takeover(std::move(t)), head(takeover.trimmed),
          read_end(takeover.trimmed), lease(std::make_shared<const lease_ref>(lease_ref{i, names, takeover.token})) {}
    std::uint32_t index;
    shard_names names;
    shard_takeover takeover;
    std::uint64_t head;                            // position of the queue's head, as acknowledged
    std::uint64_t read_end;                        // position after the last entry read
    std::unordered_set<std::string> done;          // ids finished under an earlier owner, not read yet
    std::map<std::uint64_t, std::string> done_at;  // those read (skipped), by position, until trimmed
    std::shared_ptr<const lease_ref> lease;        // in leases_ while held
    bool at_end = false;                           // the last read reached the queue's end
  };
  // An entry's attempt when it finished under an earlier owner: skipped, not run.
  static constexpr std::uint32_t finished_before = 0;

  // Drops the shards renew() found lost.
  void drop_lost();
  // Forgets held_[at], lost or released: its lease, its dispatcher state, its entry.
  void let_go(std::size_t at);
  // With `release` (nothing is running): a shard whose entries read are all finished and
  // whose last read reached its queue's end is released with its acknowledgement while
  // its queue is still empty (drain).
  std::size_t acknowledge(bool release);
  std::size_t read();
  void lose(std::size_t at, std::string_view why);
  entry_end run(const shard_entry& e, std::optional<std::string>& state);

  // Waits until an entry finished since the last wait, or 10 ms.
  void wait_finished();

  shard_store& store_;
  shard_owner_settings s_;
  handler handler_;
  error_hook on_error_;
  std::vector<std::unique_ptr<held_shard>> held_;
  std::mutex lease_mu_;
  std::vector<std::shared_ptr<const lease_ref>> leases_;  // held; guarded by lease_mu_
  std::vector<std::shared_ptr<const lease_ref>> lost_;    // found lost by renew, not dropped yet; guarded
  std::int64_t renewed_ms_ = 0;                           // guarded by lease_mu_
  // Per shard index: found lost, its entries do not start. Set by renew() (release: pairs
  // with run's acquire), cleared by take().
  std::unique_ptr<std::atomic<bool>[]> lost_flags_;
  std::mutex finished_mu_;
  std::condition_variable finished_cv_;
  std::uint64_t finished_ = 0;       // entries finished, counted by the dispatcher's hook; guarded by finished_mu_
  std::uint64_t finished_seen_ = 0;  // the count the last wait_finished returned at
  shard_dispatch dispatch_;          // last: destroyed first, while what its handlers use lives
};

}  // namespace handoff::redis::detail
