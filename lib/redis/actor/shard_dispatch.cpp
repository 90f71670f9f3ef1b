// shard_dispatch and ack_window (shard_dispatch.hpp): a shard owner's entries run per key
// on in-process actors, and what the owner acknowledges. One mutex guards the counts, the
// windows and the key table; handlers hold it only to check their shard and to record
// their end, never while they run.
#include "shard_dispatch.hpp"

#include <stdexcept>
#include <utility>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/run_deferred.hpp"

namespace handoff::redis::detail {

using handoff::detail::scoped_lock;

namespace {

// Every key's actor: no budget, so a key's entries run on in one turn while they come.
std::shared_ptr<const handoff::actor_options> options_for(executor_ref executor) {
  handoff::actor_options o;
  o.executor = executor;
  return std::make_shared<const handoff::actor_options>(std::move(o));
}

}  // namespace

void ack_window::append(std::uint64_t seq) {
  if (!started_) {
    started_ = true;
    head_ = seq;
  }
  HANDOFF_ASSERT(seq == next_seq());
  slots_.emplace_back();
}

void ack_window::unappend(std::size_t n) noexcept {
  HANDOFF_ASSERT(n <= slots_.size());
  for (; n > 0; --n) {
    HANDOFF_ASSERT(!slots_.back().finished);
    slots_.pop_back();
  }
}

void ack_window::finish(finished_entry e) {
  HANDOFF_ASSERT(e.seq >= head_ && e.seq < next_seq());
  slot& s = slots_[e.seq - head_];
  HANDOFF_ASSERT(!s.finished);
  s.finished = true;
  finished_.push_back(std::move(e));
}

shard_ack ack_window::take() {
  shard_ack a;
  while (!slots_.empty() && slots_.front().finished) {
    if (slots_.front().reported) a.done_remove.push_back(std::move(slots_.front().id));
    slots_.pop_front();
    ++head_;
    ++a.trim;
  }
  // What finished since the last take and is not trimmed now sits behind an unfinished
  // entry: the server records it by id. Each finishes once, so each is reported once.
  for (const finished_entry& f : finished_) {
    if (f.seq < head_) continue;
    slot& s = slots_[f.seq - head_];
    s.reported = true;
    s.id = f.id;
    a.done_add.push_back(f.id);
  }
  a.finished = std::exchange(finished_, {});
  return a;
}

shard_dispatch::shard_dispatch(executor_ref executor, std::size_t max_unfinished, run_fn run,
                               std::function<void()> on_finished, std::function<void(std::exception_ptr)> on_error)
    : max_unfinished_(max_unfinished), run_(std::move(run)), on_finished_(std::move(on_finished)),
      on_error_(std::move(on_error)), options_(options_for(executor)) {
  if (max_unfinished_ == 0) throw std::invalid_argument("handoff: shard_dispatch needs max_unfinished > 0");
  if (!run_) throw std::invalid_argument("handoff: shard_dispatch needs a run function");
}

shard_dispatch::~shard_dispatch() {
  std::unordered_map<std::string_view, std::unique_ptr<key_slot>> keys;
  {
    const scoped_lock l(mu_);
    for (auto& [shard, s] : shards_) s.dropped = true;
    while (running_ != 0) changed_.wait(mu_);
    shards_.clear();
    unfinished_ = 0;
    keys.swap(keys_);
  }
  // Each ~actor waits for the messages still queued, which find their shard gone and only
  // uncount their key: the slots stay alive until their own actor is destroyed.
  keys.clear();
  const scoped_lock l(mu_);
  idle_.clear();
}

std::size_t shard_dispatch::room() const {
  const scoped_lock l(mu_);
  return max_unfinished_ - unfinished_;
}

std::size_t shard_dispatch::live_keys() const {
  const scoped_lock l(mu_);
  return keys_.size();
}

void shard_dispatch::dispatch(std::uint32_t shard, std::vector<shard_entry> entries) {
  reap();
  if (entries.empty()) return;
  const std::size_t n = entries.size();
  std::vector<key_slot*> targets;
  targets.reserve(n);
  std::uint64_t generation = 0;
  {
    const scoped_lock l(mu_);
    if (n > max_unfinished_ - unfinished_) throw std::logic_error("handoff: shard_dispatch::dispatch beyond room()");
    auto found = shards_.find(shard);
    const std::uint64_t first =
        found != shards_.end() && found->second.window.started() ? found->second.window.next_seq() : entries[0].seq;
    for (std::size_t i = 0; i < n; ++i) {
      if (entries[i].seq != first + i)
        throw std::invalid_argument("handoff: shard_dispatch::dispatch: seq out of order");
    }
    if (found == shards_.end()) {
      found = shards_.try_emplace(shard).first;
      found->second.generation = ++generations_;
    }
    shard_state& s = found->second;
    // Counted before sent: a message that runs at once finds its window slot and counts.
    const std::size_t before = s.window.size();
    try {
      for (const shard_entry& e : entries) {
        auto k = keys_.find(e.key);
        if (k == keys_.end()) {
          auto slot = std::make_unique<key_slot>(e.key, options_);
          const std::string_view name = slot->key;
          k = keys_.emplace(name, std::move(slot)).first;
        }
        ++k->second->unfinished;
        targets.push_back(k->second.get());  // reserved: cannot throw
        s.window.append(e.seq);
      }
    } catch (...) {  // std::bad_alloc: take back what this call counted
      s.window.unappend(s.window.size() - before);
      for (key_slot* k : targets) release_key(*k);
      throw;
    }
    s.unfinished += n;
    unfinished_ += n;
    generation = s.generation;
  }
  std::size_t sent = 0;
  try {
    for (; sent < n; ++sent) {
      key_slot* k = targets[sent];
      // defer: never runs here now (the executor's, or this thread's run queue below).
      k->actor.defer([this, k, shard, generation, e = std::move(entries[sent])](key_state&) mutable noexcept {
        run_entry(*k, shard, generation, e);
      });
    }
  } catch (...) {
    // Nothing of the unsent ones ran: take their counts back, so the owner may send them again.
    const std::size_t unsent = n - sent;
    const scoped_lock l(mu_);
    shard_state& s = shards_.at(shard);
    s.window.unappend(unsent);
    s.unfinished -= unsent;
    unfinished_ -= unsent;
    for (std::size_t i = sent; i < n; ++i) release_key(*targets[i]);
    throw;
  }
  (void)handoff::run_deferred();
}

void shard_dispatch::run_entry(key_slot& k, std::uint32_t shard, std::uint64_t generation, shard_entry& e) noexcept {
  shard_state* s = nullptr;
  {
    const scoped_lock l(mu_);
    const auto found = shards_.find(shard);
    if (found == shards_.end() || found->second.generation != generation || found->second.dropped) {
      release_key(k);  // dropped: drop() took it out of the counts already
      return;
    }
    s = &found->second;  // stays: drop() waits for running to fall to 0 before erasing it
    ++s->running;
    ++running_;
  }
  std::optional<std::string> state;
  entry_end end = entry_end::dead;
  try {
    end = run_(e, state);
  } catch (...) {
    state.reset();
    report(std::current_exception());
  }
  {
    const scoped_lock l(mu_);
    HANDOFF_ASSERT(s->running > 0 && s->unfinished > 0 && unfinished_ > 0);
    --s->running;
    --running_;
    --s->unfinished;
    --unfinished_;
    s->window.finish(
        finished_entry{e.seq, std::move(e.key), std::move(e.id), std::move(e.body), end, std::move(state)});
    release_key(k);
  }
  // After mu_: `this` and `k` stay alive until this handler returns, since whoever
  // destroys k's actor (reap, ~shard_dispatch) waits for its running message in ~actor.
  changed_.notify_all();
  if (on_finished_) {
    try {
      on_finished_();
    } catch (...) {
      report(std::current_exception());
    }
  }
}

void shard_dispatch::release_key(key_slot& k) {
  HANDOFF_ASSERT(k.unfinished > 0);
  if (--k.unfinished == 0 && !k.listed) {
    k.listed = true;
    idle_.push_back(&k);
  }
}

void shard_dispatch::reap() {
  std::vector<decltype(keys_)::node_type> freed;
  {
    const scoped_lock l(mu_);
    for (key_slot* k : idle_) {
      k->listed = false;
      // Only this thread counts a key up, so one still at 0 gets no message until it is gone.
      if (k->unfinished == 0) freed.push_back(keys_.extract(k->key));
    }
    idle_.clear();
  }
  // Outside mu_: ~actor waits for the handler that uncounted the key to return, and that
  // handler may still take mu_ (never here: it released it), or call on_finished.
}

shard_ack shard_dispatch::take_ack(std::uint32_t shard) {
  reap();
  const scoped_lock l(mu_);
  const auto found = shards_.find(shard);
  if (found == shards_.end()) return {};
  return found->second.window.take();
}

void shard_dispatch::drop(std::uint32_t shard) {
  {
    const scoped_lock l(mu_);
    const auto found = shards_.find(shard);
    if (found == shards_.end()) return;
    shard_state& s = found->second;
    s.dropped = true;  // from here its messages only uncount their keys
    while (s.running != 0) changed_.wait(mu_);
    unfinished_ -= s.unfinished;  // none of them is running: they never will
    shards_.erase(found);
  }
  reap();
}

void shard_dispatch::wait_idle() {
  (void)handoff::run_deferred();  // what this thread holds for its keys, if anything
  {
    const scoped_lock l(mu_);
    while (unfinished_ != 0) changed_.wait(mu_);
  }
  reap();
}

void shard_dispatch::report(std::exception_ptr e) const noexcept {
  if (on_error_) {
    try {
      on_error_(e);
      return;
    } catch (...) {
      e = std::current_exception();
    }
  }
  handoff::detail::report_to_stderr(e, "a Redis actor's shard entry");
}

}  // namespace handoff::redis::detail
