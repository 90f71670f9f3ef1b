#include "shard_owner.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "../common/lease_ms.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

shard_owner::shard_owner(shard_store& store, shard_owner_settings s, handler h, error_hook on_error)
    : store_(store), s_(std::move(s)), handler_(std::move(h)), on_error_(std::move(on_error)),
      lost_flags_(std::make_unique<std::atomic<bool>[]>(s_.shards)),
      dispatch_(
          s_.executor, s_.max_unfinished,
          [this](const shard_entry& e, std::optional<std::string>& state) { return run(e, state); },
          [this] {
            {
              const std::lock_guard lock(finished_mu_);
              ++finished_;
            }
            finished_cv_.notify_one();
          },
          [this](const std::exception_ptr& e) { on_error_({}, e); }) {}

shard_owner::~shard_owner() = default;

bool shard_owner::take(std::uint32_t index) {
  std::int64_t left_ms = 0;
  std::optional<shard_takeover> t =
      store_.take(shard_names(s_.prefix, s_.family, index), s_.owner_id, s_.lease_ms, left_ms);
  if (!t) return false;
  auto h = std::make_unique<held_shard>(s_, index, std::move(*t));
  for (std::string& id : h->takeover.done) h->done.insert(std::move(id));
  h->takeover.done.clear();
  lost_flags_[index].store(false, std::memory_order_relaxed);  // nothing of it runs before dispatch
  {
    const std::lock_guard lock(lease_mu_);
    // The first lease held: the next renewal a third of the lease from now, not at once.
    if (leases_.empty()) renewed_ms_ = handoff::detail::now_ns() / ms_ns;
    leases_.push_back(h->lease);
  }
  held_.push_back(std::move(h));
  return true;
}

std::size_t shard_owner::round(std::int64_t now_ms) {
  renew(now_ms);
  drop_lost();
  return acknowledge(false) + read();
}

void shard_owner::renew(std::int64_t now_ms) {
  std::vector<std::shared_ptr<const lease_ref>> refs;
  {
    const std::lock_guard lock(lease_mu_);
    if (leases_.empty() || now_ms - renewed_ms_ < s_.lease_ms / 3) return;
    renewed_ms_ = now_ms;  // before the round trip: a concurrent call does not renew twice
    refs = leases_;
  }
  std::vector<std::pair<const shard_names*, std::string>> tokens;
  tokens.reserve(refs.size());
  for (const auto& r : refs) tokens.emplace_back(&r->names, r->token);
  const std::vector<bool> renewed = store_.renew(tokens, s_.lease_ms);
  const std::lock_guard lock(lease_mu_);
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (renewed[i] || std::find(leases_.begin(), leases_.end(), refs[i]) == leases_.end()) continue;
    lost_flags_[refs[i]->index].store(true, std::memory_order_release);
    lost_.push_back(refs[i]);
  }
}

void shard_owner::drop_lost() {
  std::vector<std::shared_ptr<const lease_ref>> lost;
  {
    const std::lock_guard lock(lease_mu_);
    lost.swap(lost_);
  }
  for (const auto& r : lost) {
    for (std::size_t i = 0; i < held_.size(); ++i) {
      if (held_[i]->lease == r) {
        lose(i, "its lease ran out before its renewal");
        break;
      }
    }
  }
}

void shard_owner::let_go(std::size_t at) {
  const held_shard& h = *held_[at];
  {
    const std::lock_guard lock(lease_mu_);
    leases_.erase(std::remove(leases_.begin(), leases_.end(), h.lease), leases_.end());
  }
  // Its window goes too (nothing of it runs now, or it was lost): a later owner may have
  // trimmed past it when this process takes the shard again.
  dispatch_.drop(h.index);
  held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(at));
}

std::size_t shard_owner::acknowledge(bool release) {
  std::size_t n = 0;
  for (std::size_t i = held_.size(); i-- > 0;) {
    held_shard& h = *held_[i];
    shard_ack a = dispatch_.take_ack(h.index);
    const std::uint64_t head = h.head + a.trim;
    // A drain's last step: everything read is finished and acknowledged here, and the
    // last read reached the queue's end: the acknowledgement (perhaps of nothing) releases
    // the shard if its queue is still empty.
    const bool last = release && h.at_end && h.read_end == head;
    if (a.empty() && !last) continue;
    shard_ack_write w;
    w.trim = a.trim;
    w.done_add = std::move(a.done_add);
    w.done_remove = std::move(a.done_remove);
    for (finished_entry& f : a.finished) {
      if (f.end == entry_end::dead) {
        w.dead.push_back({f.key, f.id + ' ' + f.body});
      } else if (f.state) {
        w.states.push_back({f.key, f.id, std::move(*f.state)});
      }
    }
    // The earlier owner's done ids that this trim passes leave the set too.
    for (auto it = h.done_at.begin(); it != h.done_at.end() && it->first < head; it = h.done_at.erase(it)) {
      w.done_remove.push_back(std::move(it->second));
    }
    n += a.finished.size();
    w.release_if_empty = last;
    switch (store_.ack(h.names, h.takeover.token, w)) {
      case shard_store::acked::refused:
        lose(i, "its lease was taken before the acknowledgement");
        continue;
      case shard_store::acked::released:
        let_go(i);
        continue;
      case shard_store::acked::written:
        h.head = head;
        if (w.release_if_empty) h.at_end = false;  // a post came after the last read: read on
        break;
    }
  }
  return n;
}

std::size_t shard_owner::read() {
  std::size_t n = 0;
  for (const auto& hp : held_) {
    held_shard& h = *hp;
    const std::size_t room = dispatch_.room();
    if (room == 0) break;
    const std::vector<std::string> elements =
        store_.read(h.names, h.read_end - h.head, std::min<std::uint64_t>(room, s_.read_batch));
    h.at_end = elements.size() < std::min<std::uint64_t>(room, s_.read_batch);
    if (elements.empty()) continue;
    std::vector<shard_entry> batch;
    batch.reserve(elements.size());
    for (const std::string& element : elements) {
      shard_entry e{};
      e.seq = h.read_end++;
      const std::optional<entry_parts> p = parse_entry(element);
      if (!p) {  // not an entry of this format: reported, then trimmed like a handled one
        on_error_({}, std::make_exception_ptr(
                          error("handoff::redis: a shard's queue holds an element that is not an entry: " +
                                handoff::detail::key_excerpt(element))));
        e.attempt = finished_before;
      } else {
        e.id = std::string(p->id);
        e.key = std::string(p->key);
        e.body = std::string(p->body);
        e.attempt = h.takeover.delivery(e.seq);
        if (h.done.erase(e.id) != 0) {  // finished under an earlier owner, past a slow key
          e.attempt = finished_before;
          h.done_at.emplace(e.seq, e.id);
        }
      }
      batch.push_back(std::move(e));
    }
    n += batch.size();
    dispatch_.dispatch(h.index, std::move(batch));
  }
  return n;
}

void shard_owner::lose(std::size_t at, std::string_view why) {
  const std::uint32_t index = held_[at]->index;
  lost_flags_[index].store(true, std::memory_order_release);
  let_go(at);
  on_error_({},
            std::make_exception_ptr(error("handoff::redis: lost shard " + std::to_string(index) + " of the family " +
                                          handoff::detail::key_excerpt(s_.family) + ": " + std::string(why))));
}

entry_end shard_owner::run(const shard_entry& e, std::optional<std::string>& state) {
  // Lost: not run here; its acknowledgement will be refused, and the next owner runs it.
  // acquire: pairs with renew()'s release.
  if (lost_flags_[shard_of(e.key, s_.shards)].load(std::memory_order_acquire)) return entry_end::handled;
  // Decided when read: it still passes through its key's actor, so that it ends in its
  // key's order.
  if (e.attempt == finished_before) return entry_end::handled;
  if (e.attempt > s_.max_attempts) return entry_end::dead;
  for (std::uint32_t attempt = e.attempt;; ++attempt) {
    delivery d(e.key, e.id, e.body, attempt, {}, {});
    try {
      handler_(d);
      if (const std::string* staged = d.staged_state()) state = *staged;
      return entry_end::handled;
    } catch (...) {
      on_error_(e.key, std::current_exception());
      if (attempt >= s_.max_attempts) return entry_end::dead;
    }
  }
}

void shard_owner::drain() {
  while (!held_.empty()) {
    renew(handoff::detail::now_ns() / ms_ns);
    drop_lost();
    // Nothing running: acknowledging may release the shards read to their queue's end.
    acknowledge(dispatch_.room() == s_.max_unfinished);
    if (read() == 0 && dispatch_.room() != s_.max_unfinished) wait_finished();  // entries running on the executor
  }
}

void shard_owner::wait_finished() {
  std::unique_lock lock(finished_mu_);
  finished_cv_.wait_for(lock, std::chrono::milliseconds(10), [this] { return finished_ != finished_seen_; });
  finished_seen_ = finished_;
}

void shard_owner::release_all() {
  dispatch_.wait_idle();
  acknowledge(false);
  while (!held_.empty()) {
    (void)store_.release(held_.back()->names, held_.back()->takeover.token, true);
    let_go(held_.size() - 1);
  }
}

std::vector<std::uint32_t> shard_owner::owned() const {
  std::vector<std::uint32_t> out;
  out.reserve(held_.size());
  for (const auto& h : held_) out.push_back(h->index);
  return out;
}

}  // namespace handoff::redis::detail
