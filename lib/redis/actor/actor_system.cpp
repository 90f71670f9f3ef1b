// handoff::redis::actor_system: the facade, and the core's own job: post, and where an
// owner continues its actor (actor_core.hpp lists the other parts).
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/ids.hpp"
#include "../common/lease_ms.hpp"
#include "actor_core.hpp"
#include "delayed_scripts.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

namespace {

// A drain queued on this thread's run queue (continue_owned inside other work). It holds
// the core (so it may outlive the facade, as an executor job does) and what the drain
// needs, keeps its registration with the renewer while it waits, and frees itself.
struct drain_task : handoff::detail::task {
  drain_task(std::shared_ptr<actor_core> c, actor_names names, std::string t)
      : core(std::move(c)), n(std::move(names)), token(std::move(t)) {
    run = &run_drain;
  }
  static void run_drain(handoff::detail::task* t) noexcept {
    const std::unique_ptr<drain_task> self(static_cast<drain_task*>(t));
    self->core->background.unregister_drain(self->token);
    self->core->drains.drain(self->n, self->token);  // reports its failures to on_error
  }
  std::shared_ptr<actor_core> core;
  actor_names n;
  std::string token;
};

}  // namespace

actor_core::actor_core(options opts, actor_options ao)
    : o(validated(std::move(opts))), settings(std::move(ao)),
      servers(o), post_script{actor_scripts::source(actor_scripts::post), {}},
      step_script{actor_scripts::source(actor_scripts::step), {}},
      renew_script{actor_scripts::source(actor_scripts::renew), {}},
      claim_script{actor_scripts::source(actor_scripts::claim), {}},
      due_script{actor_scripts::delayed_source(actor_scripts::due), {}},
      delay_script{actor_scripts::source(actor_scripts::delay), {}},
      cancel_script{actor_scripts::delayed_source(actor_scripts::cancel_delayed), {}}, id_(random_hex128()) {
  check_server(servers, o, "an evicted mailbox or owner key loses messages or lets two owners in");
  servers.each_primary([&](connection& c) {
    for (script* s :
         {&post_script, &step_script, &renew_script, &claim_script, &due_script, &delay_script, &cancel_script}) {
      c.load(*s);
    }
  });
}

void actor_core::report(std::string_view key, const std::exception_ptr& e) const noexcept {
  if (a.on_error) {
    try {
      a.on_error(key, e);
      return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): documented as must not throw; fall through to stderr
    }
  }
  handoff::detail::report_to_stderr(e, "a handoff::redis actor");
}

void actor_core::check_body_size(std::size_t bytes, const char* call) const {
  if (bytes > a.max_message_bytes) {
    throw std::invalid_argument(std::string("handoff::redis::actor_system::") + call + ": a body of " +
                                std::to_string(bytes) + " bytes, over max_message_bytes " +
                                std::to_string(a.max_message_bytes));
  }
}

std::optional<std::string> actor_core::try_post(std::string_view key, std::string_view body) {
  check_body_size(body.size(), "post");
  const actor_names n = names(key);
  std::string id = next_id();
  std::string element = id + ' ';
  element += body;
  // Inside other work the caller may own the actor, but drains after that work (or on the
  // executor): its message is not delivered by the reply.
  const bool nested = inside_work();
  const bool can_own = handlers.find(key) != nullptr;
  const std::string what = describe("post to", key);
  // What this caller does if its post wins the actor (scripts.hpp).
  const char* on_win = !can_own ? "q" : nested ? "o" : a.remember_handled ? "s" : "d";
  const reply r = servers.eval(post_script, {n.mailbox, n.owner, n.pending, n.delivered, n.state},
                               {element, settings.bound, on_win, settings.lease_px, key}, what);
  // The token of an owner that won by posting is its message's id.
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_INTEGER &&
      r->element[0]->integer == 2 && !nested) {
    const first_delivery first{id, body, text(*r->element[1]), text(*r->element[2])};
    continue_owned(n, id, &first);
    return id;
  }
  if (r->type != REDIS_REPLY_INTEGER || r->integer < -1 || r->integer > 1) unexpected(what);
  if (r->integer == -1) return std::nullopt;
  if (r->integer == 1) continue_owned(n, id);
  return id;
}

std::string actor_core::next_delayed_id() {
  std::string sequence = std::to_string(seq_.fetch_add(1, std::memory_order_relaxed));
  return id_ + "-" + std::string(20 - sequence.size(), '0') + sequence;  // 20: a uint64's digits
}

std::string actor_core::post_delayed(std::string_view key, std::string_view body, std::chrono::nanoseconds delay) {
  check_body_size(body.size(), "post_after");
  const actor_names n = names(key);
  const delayed_names d(n.pending);
  std::string id = next_delayed_id();
  // The record the sweep that moves it reads (scripts.hpp): both names' lengths, the
  // names, then the element.
  std::string record = std::to_string(n.mailbox.size()) + ' ' + std::to_string(key.size()) + ' ' + n.mailbox;
  record += key;
  record += id;
  record += ' ';
  record += body;
  // Whole milliseconds, rounded up (never early), at most lease_ms's "never".
  const std::int64_t ms = delay.count() <= 0 ? 0 : lease_to_ms(delay.count());
  const std::string what = describe("delayed post to", key);
  const reply r = servers.eval(delay_script, {d.set, d.bodies}, {id, std::to_string(ms), record}, what);
  if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) unexpected(what);
  return id;
}

bool actor_core::cancel_delayed(std::string_view key, std::string_view id) {
  const delayed_names d(names(key).pending);
  const std::string what = describe("cancel of a delayed post to", key);
  const reply r = servers.eval(cancel_script, {d.set, d.bodies}, {id, key}, what);
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > 1) unexpected(what);
  return r->integer == 1;
}

void actor_core::continue_owned(const actor_names& n, const std::string& token, const first_delivery* first) {
  const bool inside = inside_work();
  HANDOFF_ASSERT(first == nullptr || !inside);
  if (a.executor && inside) {
    queue_drain(n, token);
  } else {
    drain_on_this_thread(n, token, first);
  }
}

void actor_core::drain_on_this_thread(const actor_names& n, const std::string& token,
                                      const first_delivery* first) noexcept {
  if (!inside_work()) return drains.drain(n, token, first, nullptr, first != nullptr && a.executor);
  try {
    auto t = std::make_unique<drain_task>(shared_from_this(), n, token);
    // Registered before it is queued, so that the renewer keeps the lease while it waits.
    background.register_drain(token, n.key);
    handoff::detail::schedule(t.release());  // runs after the current work, on this thread
  } catch (...) {
    // Out of memory: the actor stays owned until its lease runs out; then a sweeper takes
    // it over (a post never does).
    report(n.key, std::current_exception());
  }
}

void actor_core::queue_drain(const actor_names& n, const std::string& token) {
  // Registered before it is queued, so that the renewer keeps the lease while it waits.
  background.register_drain(token, n.key);
  try {
    handoff::execute(a.executor, [self = shared_from_this(), n, token] {
      self->background.unregister_drain(token);
      self->drain_on_this_thread(n, token);  // an executor that runs jobs inline: after the work
    });
  } catch (...) {
    background.unregister_drain(token);  // the lease runs out and a sweeper takes the actor over
    throw;
  }
}

}  // namespace handoff::redis::detail

namespace handoff::redis {

actor_system::actor_system(options o, actor_options a)
    : core_(std::make_shared<detail::actor_core>(std::move(o), std::move(a))) {
  core_->background.start();
}

actor_system::~actor_system() { core_->background.stop(); }

void actor_system::on(std::string family, handler h) { core_->handlers.on(std::move(family), std::move(h)); }

std::optional<std::string> actor_system::try_post(std::string_view key, std::string_view body) {
  return core_->try_post(key, body);
}

std::string actor_system::post(std::string_view key, std::string_view body) {
  if (auto id = core_->try_post(key, body)) return std::move(*id);
  throw handoff::mailbox_full("handoff::redis::actor_system::post: the mailbox of " +
                              handoff::detail::key_excerpt(key) + " holds its capacity (" +
                              std::to_string(core_->a.capacity) + ") messages");
}

std::string actor_system::post_for(std::string_view key, std::string_view body, std::chrono::milliseconds timeout) {
  const std::int64_t deadline = handoff::detail::deadline_after(handoff::detail::now_ns(), timeout);
  for (auto pause = detail::post_retry_min;; pause = std::min(pause * 2, detail::post_retry_max)) {
    if (auto id = core_->try_post(key, body)) return std::move(*id);
    const std::int64_t now = handoff::detail::now_ns();
    if (now >= deadline) return post(key, body);  // one last try, which throws mailbox_full
    // About to block: first run what this thread owns only through its run queue (it may
    // be what would make room, or what another thread waits for).
    handoff::detail::run_before_blocking();
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(pause, std::chrono::nanoseconds(deadline - now)));
  }
}

std::string actor_system::post_after(std::string_view key, std::string_view body, std::chrono::nanoseconds delay) {
  return core_->post_delayed(key, body, delay);
}

std::string actor_system::post_at(std::string_view key, std::string_view body,
                                  std::chrono::system_clock::time_point when) {
  // Compared before subtracting: an instant long past (time_point::min()) minus now would
  // overflow into the far future.
  const auto now = std::chrono::system_clock::now();
  return core_->post_delayed(key, body, when <= now ? std::chrono::nanoseconds(0) : when - now);
}

bool actor_system::cancel_delayed(std::string_view key, std::string_view id) { return core_->cancel_delayed(key, id); }

std::size_t actor_system::sweep() { return core_->background.sweep(); }

std::size_t actor_system::pending(std::string_view key) {
  const detail::actor_names n = core_->names(key);
  const std::string what = detail::describe("pending of", key);
  const detail::reply r = core_->servers.command(n.mailbox, {"LLEN", n.mailbox}, what);
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) detail::unexpected(what);
  return static_cast<std::size_t>(r->integer);
}

std::vector<dead_letter> actor_system::dead_letters(std::string_view key) {
  const detail::actor_names n = core_->names(key);
  const std::string what = detail::describe("dead letters of", key);
  const detail::reply r = core_->servers.command(n.dead, {"LRANGE", n.dead, "0", "-1"}, what);
  if (r->type != REDIS_REPLY_ARRAY) detail::unexpected(what);
  std::vector<dead_letter> out;
  out.reserve(r->elements);
  for (std::size_t i = 0; i < r->elements; ++i) {
    const auto [id, body] = detail::split(detail::text(*r->element[i]), what);
    out.emplace_back(std::string(id), std::string(body));
  }
  return out;
}

const options& actor_system::config() const noexcept { return core_->o; }

}  // namespace handoff::redis
