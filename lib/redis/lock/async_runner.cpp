// The async waiters' attempts, run by the background thread (see client.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <system_error>

#include "client.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

namespace {
// One finished async request on its way to the callback thread.
struct callback_task final : handoff::detail::task {
  callback_task(std::unique_ptr<async_request> req, guard g, std::exception_ptr e) noexcept
      // NOLINTNEXTLINE(bugprone-throw-keyword-missing): an exception_ptr is stored, not thrown
      : r(std::move(req)), result(std::move(g)), failure(std::move(e)) {
    run = &call;
  }
  std::unique_ptr<async_request> r;
  guard result;
  std::exception_ptr failure;

  static void call(handoff::detail::task* t) noexcept {
    std::unique_ptr<callback_task> self(static_cast<callback_task*>(t));
    try {
      self->r->cb(std::move(self->result), std::move(self->failure));
    } catch (...) {
      handoff::detail::report_to_stderr(std::current_exception(), "a redis::keyed_mutex::lock_async callback");
    }
  }
};
}  // namespace

void client::complete(std::unique_ptr<async_request> r, guard g, std::exception_ptr e) noexcept {
  {
    const std::lock_guard lock(reg_mu_);
    waiters_.erase(r->id);
  }
  void* memory = ::operator new(sizeof(callback_task), std::nothrow);
  if (memory != nullptr) return callbacks_.post(::new (memory) callback_task(std::move(r), std::move(g), std::move(e)));
  try {  // no memory for the task: run the callback here rather than lose it
    r->cb(std::move(g), std::move(e));
  } catch (...) {
    handoff::detail::report_to_stderr(std::current_exception(), "a redis::keyed_mutex::lock_async callback");
  }
}

void client::run_async(std::int64_t now) {
  std::vector<std::pair<std::unique_ptr<async_request>, std::pair<guard, std::exception_ptr>>> done;
  for (auto& r : async_) {
    if (r->w.granted(r->beat)) {  // granted by a release (on_message): no round trip
      guard g(granted(r->key, r->id, r->w.granted_fence, r->lease_ns, announced(r->sent, r->lease_ns, r->w.waited_ms)));
      done.emplace_back(std::move(r), std::pair{std::move(g), nullptr});
      continue;
    }
    if (r->next_check > now) continue;
    const key_names n(o.prefix, r->key);
    try {
      connection& c = bg_connection();
      // Once queued, attempts carry the id up to the last one (which may still be granted),
      // and a request that then gives up leaves the queue. wait 0: one try, never queued.
      const bool queue = r->queued || r->deadline > now;
      if (r->queued) counters.recheck();  // queued before, and no notification granted it
      r->sent = now_ns();
      const attempt_result a = attempt(c, n, r->id, lease_ms(r->lease_ns), queue, r->key);  // as in acquire()
      r->queued = queue && !a.granted;
      if (a.granted) {
        guard g(
            granted(r->key, r->id, static_cast<std::uint64_t>(a.value), r->lease_ns, found(r->sent, r->lease_ns, a)));
        done.emplace_back(std::move(r), std::pair{std::move(g), nullptr});
      } else if (now_ns() >= r->deadline) {
        if (r->queued) cancel(c, n, r->id, r->key);  // passes on a grant that came meanwhile
        done.emplace_back(std::move(r), std::pair{guard(), nullptr});
      } else {
        r->beat = a.extra;
        r->next_check = next_check(now_ns(), r->deadline, a.value);
      }
    } catch (...) {
      done.emplace_back(std::move(r), std::pair{guard(), std::current_exception()});
    }
  }
  std::erase(async_, nullptr);
  for (auto& [r, result] : done) complete(std::move(r), std::move(result.first), std::move(result.second));
}

}  // namespace handoff::redis::detail
