// handoff::redis::actor_system: post, the owner's drain loop, and the facade
// (actor_system.hpp; the scripts in scripts.hpp; the threads in actor_threads.cpp).
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/ids.hpp"
#include "actor_core.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

namespace {

// True when this thread runs work of the library now: an in-process actor's handler, a
// keyed-mutex callback, a coroutine the library resumed, a task of the run queue, or a
// Redis handler (which runs under a frame of its own, see handler_frame). An actor won
// there never drains inside that work (continue_owned): no network round trip and no
// other actor's handler runs nested in a handler, and a chain of actors posting to each
// other cannot grow the stack.
bool inside_work() noexcept { return handoff::detail::tls.top != nullptr; }

// A handler runs as work of the runtime, under a frame of its own (a sentinel: it drains no
// in-process actor), so that what it makes runnable on this thread (an in-process actor, a
// keyed-mutex grant, a Redis actor won by its post) waits until it returns. At top level
// the thread's queue then runs, before the drain's next step; inside other work, the queue
// runs when that work returns.
class handler_frame {
 public:
  handler_frame() noexcept : frame_{nullptr, handoff::detail::tls.top, 0} { handoff::detail::tls.top = &frame_; }
  handler_frame(const handler_frame&) = delete;
  handler_frame& operator=(const handler_frame&) = delete;
  ~handler_frame() {
    handoff::detail::tls.top = frame_.parent;
    if (frame_.parent == nullptr) handoff::detail::run_queued();
  }

 private:
  handoff::detail::drain_frame frame_;
};

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
    self->core->unregister_drain(self->token);
    self->core->drain(self->n, self->token);  // reports its failures to on_error
  }
  std::shared_ptr<actor_core> core;
  actor_names n;
  std::string token;
};

[[noreturn]] void unexpected(std::string_view what) {
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply from the server");
}

std::string describe(std::string_view op, std::string_view key) {
  return std::string(op) + ' ' + handoff::detail::key_excerpt(key);
}

std::string_view text(const redisReply& r) {
  return r.type == REDIS_REPLY_STRING ? std::string_view(r.str, r.len) : "";
}

// An element "<id> <body>" split in two.
std::pair<std::string_view, std::string_view> split(std::string_view element, std::string_view what) {
  const std::size_t space = element.find(' ');
  if (space == std::string_view::npos) unexpected(what);
  return {element.substr(0, space), element.substr(space + 1)};
}

void check(const actor_options& a) {
  const auto bad = [](const char* why) {
    throw std::invalid_argument(std::string("handoff::redis::actor_system: ") + why);
  };
  if (a.max_time.count() < 0) bad("max_time must not be negative");
  if (a.max_attempts == 0) bad("max_attempts must be at least 1");
  if (a.batch == 0 || a.batch > actor_options::max_batch) bad("batch must be from 1 to actor_options::max_batch");
  if (a.sweep_interval.count() < 0) bad("sweep_interval must not be negative");
}

}  // namespace

actor_core::actor_core(options opts, actor_options ao)
    : o(std::move(opts)), a(std::move(ao)),
      connections(o, o.pool_size), post_script{actor_scripts::source(actor_scripts::post), {}},
      step_script{actor_scripts::source(actor_scripts::step), {}},
      renew_script{actor_scripts::source(actor_scripts::renew), {}},
      claim_script{actor_scripts::source(actor_scripts::claim), {}},
      due_script{actor_scripts::source(actor_scripts::due), {}}, id_(random_hex128()) {
  validate(o);
  check(a);
  connection c(o);  // fails fast on a wrong address or password
  check_server(c, o, "an evicted mailbox or owner key loses messages or lets two owners in");
  for (script* s : {&post_script, &step_script, &renew_script, &claim_script, &due_script}) c.load(*s);
}

std::shared_ptr<const actor_system::handler> actor_core::find(std::string_view key) const {
  const std::lock_guard<std::mutex> lock(handlers_mu);
  // The longest family that is a prefix of key: scan back from the last family <= key.
  for (auto it = handlers.upper_bound(key); it != handlers.begin();) {
    --it;
    if (key.starts_with(it->first)) return it->second;
    if (it->first.empty()) break;
  }
  return nullptr;
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

std::optional<std::string> actor_core::try_post(std::string_view key, std::string_view body) {
  if (body.size() > a.max_message_bytes) {
    throw std::invalid_argument("handoff::redis::actor_system::post: a body of " + std::to_string(body.size()) +
                                " bytes, over max_message_bytes " + std::to_string(a.max_message_bytes));
  }
  const actor_names n(o.prefix, key);
  std::string id = next_id();
  std::string element = id + ' ';
  element += body;
  // Inside other work the caller may own the actor, but drains after that work (or on the
  // executor): its message is not delivered by the reply.
  const bool nested = inside_work();
  const bool can_own = find(key) != nullptr;
  const std::string what = describe("post to", key);
  reply r = [&] {
    auto c = connections.take();
    return c->eval(post_script, {n.count, n.mailbox, n.owner, pending_key, n.delivered, n.state},
                   {element, bound, id, lease_px, can_own ? "1" : "0", key, nested ? "0" : "1"}, what);
  }();
  // The token of an owner that won by posting is its message's id.
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_INTEGER &&
      r->element[0]->integer == 2 && !nested) {
    const first_delivery first{id, body, text(*r->element[1]), text(*r->element[2])};
    continue_owned(n, id, false, &first);
    return id;
  }
  if (r->type != REDIS_REPLY_INTEGER || r->integer < -1 || r->integer > 1) unexpected(what);
  if (r->integer == -1) return std::nullopt;
  if (r->integer == 1) continue_owned(n, id, false);
  return id;
}

void actor_core::continue_owned(const actor_names& n, const std::string& token, bool prefer_executor,
                                const first_delivery* first) {
  const bool inside = inside_work();
  HANDOFF_ASSERT(first == nullptr || (!inside && !prefer_executor));
  if (a.executor && (prefer_executor || inside)) {
    queue_drain(n, token);
  } else {
    drain_on_this_thread(n, token, first);
  }
}

void actor_core::drain_on_this_thread(const actor_names& n, const std::string& token,
                                      const first_delivery* first) noexcept {
  if (!inside_work()) return drain(n, token, first);
  try {
    auto t = std::make_unique<drain_task>(shared_from_this(), n, token);
    // Registered before it is queued, so that the renewer keeps the lease while it waits.
    register_drain(token, n.key);
    handoff::detail::schedule(t.release());  // runs after the current work, on this thread
  } catch (...) {
    // Out of memory: the actor stays owned until its lease runs out; then a post or a
    // sweeper takes it over.
    report(n.key, std::current_exception());
  }
}

void actor_core::queue_drain(const actor_names& n, const std::string& token) {
  // Registered before it is queued, so that the renewer keeps the lease while it waits.
  register_drain(token, n.key);
  try {
    handoff::execute(a.executor, [self = shared_from_this(), n, token] {
      self->unregister_drain(token);
      self->drain_on_this_thread(n, token);  // an executor that runs jobs inline: after the work
    });
  } catch (...) {
    unregister_drain(token);  // the lease runs out and a sweeper takes the actor over
    throw;
  }
}

void actor_core::register_drain(const std::string& token, const std::string& key) {
  const std::lock_guard<std::mutex> lock(mu);
  draining.emplace(token, key);
}

void actor_core::unregister_drain(const std::string& token) noexcept {
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = draining.find(token);
  if (it != draining.end()) draining.erase(it);
}

void actor_core::drain(const actor_names& n, const std::string& token, const first_delivery* first) noexcept {
  struct registration {
    actor_core& core;
    const std::string& token;
    registration(actor_core& c, const actor_names& names, const std::string& t) : core(c), token(t) {
      core.register_drain(token, names.key);
    }
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
    ~registration() { core.unregister_drain(token); }
  };
  // One message of the batch the last step (or the post) delivered: views into its reply.
  struct message {
    std::string_view id, body;
    std::uint32_t attempt;
  };
  try {
    const registration reg(*this, n, token);
    const std::string what = describe("drain of", n.key);
    // 0: no budget, as for handoff::actor_options.
    const std::int64_t budget_end = a.max_time.count() == 0
                                        ? handoff::detail::no_deadline
                                        : handoff::detail::deadline_after(handoff::detail::now_ns(), a.max_time);
    std::string x = "0";  // messages removed this round, as the last step said
    reply r;              // the last step's reply, which `batch` and `last_id` point into
    std::vector<message> batch;
    // The state a handler sees (remember_handled): the last step's, then what the batch's
    // handlers set, committed with their dequeue by the next step.
    std::string_view last_id;
    std::string_view state;
    std::string new_state;
    bool has_state = false;
    if (first != nullptr) {  // the post that won the actor delivered its own message
      batch.push_back({first->id, first->body, 1});
      last_id = first->last_id;
      state = first->state;
    }
    std::uint32_t ran = 0;
    const auto budget_spent = [&] {
      return (a.max_messages != 0 && ran >= a.max_messages) ||
             (budget_end != handoff::detail::no_deadline && handoff::detail::now_ns() >= budget_end);
    };
    for (;;) {
      // Run the batch, in order, until its end, a handler that throws, or the budget.
      std::size_t handled = 0;
      bool threw = false;
      bool spent = false;
      for (const message& m : batch) {
        spent = budget_spent();
        if (spent) break;
        ++ran;
        delivery d(n.key, m.id, m.body, m.attempt, last_id, state);
        try {
          const auto h = find(n.key);
          if (h == nullptr) throw error("handoff::redis: " + what + ": no handler for this key in this process");
          const handler_frame frame;
          (*h)(d);
        } catch (...) {
          report(n.key, std::current_exception());  // delivered again, until max_attempts
          threw = true;
          break;
        }
        ++handled;
        if (a.remember_handled) {
          last_id = m.id;
          if (const std::string* s = d.staged_state()) {
            new_state = *s;
            state = new_state;
            has_state = true;
          }
        }
      }
      if (!threw && !spent) spent = budget_spent();
      const char* mode = !spent ? "next" : a.executor ? "keep" : "announce";
      // The next batch: no more than the message budget has left.
      const std::uint32_t size = a.max_messages == 0 ? a.batch : std::min(a.batch, a.max_messages - std::min(ran, a.max_messages));
      const std::size_t started = handled + (threw ? 1 : 0);
      const std::string_view first_id = handled != 0 ? batch.front().id : std::string_view();
      const std::string_view last_handled = handled != 0 ? batch[handled - 1].id : std::string_view();
      reply next = [&] {
        auto c = connections.take();
        return c->eval(step_script, {n.count, n.mailbox, n.owner, n.delivered, pending_key, n.dead, n.state},
                       {token, lease_px, std::to_string(handled), first_id, last_handled, x, mode, attempts,
                        a.remember_handled ? "1" : "0", has_state ? "1" : "0", new_state, n.key, size == a.batch ? batch_size : std::to_string(size),
                        std::to_string(threw ? 1 : 0), std::to_string(batch.size() - started)},
                       what);
      }();
      batch.clear();
      r = std::move(next);
      if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        unexpected(what);
      }
      const long long status = r->element[0]->integer;
      x = std::to_string(r->element[1]->integer);
      if (const long long dead = r->element[2]->integer; dead > 0) {
        std::string why = "handoff::redis: " + what + ": ";
        why += std::to_string(dead);
        why += " message(s) moved to the dead letters after ";
        why += attempts;
        why += " deliveries";
        report(n.key, std::make_exception_ptr(error(why)));
      }
      if (status == -1) {
        throw error("handoff::redis: " + what + ": ownership lost (lease ran out) before the dequeue");
      }
      if (status == 0) return;
      if (status == 2) {
        if (a.executor) queue_drain(n, token);
        return;
      }
      if (status != 1 || r->elements < 7 || (r->elements - 5) % 2 != 0) unexpected(what);
      last_id = text(*r->element[3]);
      state = text(*r->element[4]);
      new_state.clear();
      has_state = false;
      for (std::size_t i = 5; i < r->elements; i += 2) {
        const auto [id, body] = split(text(*r->element[i]), what);
        batch.push_back({id, body, static_cast<std::uint32_t>(r->element[i + 1]->integer)});
      }
    }
  } catch (...) {
    // The actor stays owned until its lease runs out; then a post or a sweeper takes over.
    report(n.key, std::current_exception());
  }
}

}  // namespace handoff::redis::detail

namespace handoff::redis {

actor_system::actor_system(options o, actor_options a)
    : core_(std::make_shared<detail::actor_core>(std::move(o), std::move(a))) {
  core_->start();
}

actor_system::~actor_system() { core_->stop(); }

void actor_system::on(std::string family, handler h) {
  auto shared = std::make_shared<const handler>(std::move(h));
  const std::lock_guard<std::mutex> lock(core_->handlers_mu);
  core_->handlers[std::move(family)] = std::move(shared);
}

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

std::size_t actor_system::sweep() { return core_->sweep(); }

std::size_t actor_system::pending(std::string_view key) {
  const detail::actor_names n(core_->o.prefix, key);
  const std::string what = detail::describe("pending of", key);
  auto c = core_->connections.take();
  const detail::reply r = c->command({"LLEN", n.mailbox}, what);
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) detail::unexpected(what);
  return static_cast<std::size_t>(r->integer);
}

std::vector<dead_letter> actor_system::dead_letters(std::string_view key) {
  const detail::actor_names n(core_->o.prefix, key);
  const std::string what = detail::describe("dead letters of", key);
  const detail::reply r = [&] {
    auto c = core_->connections.take();
    return c->command({"LRANGE", n.dead, "0", "-1"}, what);
  }();
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
