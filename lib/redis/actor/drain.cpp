// handoff::redis::actor_system: the owner's drain loop (actor_core.hpp): batches peeked,
// run in order and dequeued by the step script (scripts.hpp); and the steps a post's owner
// leaves to the executor, sent together (run_steps).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "actor_core.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

namespace {

// A handler runs as work of the runtime, under a frame of its own (a sentinel: it drains no
// in-process actor), so that what it makes runnable on this thread (an in-process actor, a
// keyed-mutex grant, a Redis actor won by its post) waits until it returns. At top level
// the thread's queue then runs, before the drain's next step; inside other work, the queue
// runs when that work returns.
class handler_frame {
 public:
  handler_frame() noexcept : frame_{nullptr, 0, handoff::detail::tls.top} { handoff::detail::tls.top = &frame_; }
  handler_frame(const handler_frame&) = delete;
  handler_frame& operator=(const handler_frame&) = delete;
  ~handler_frame() {
    handoff::detail::tls.top = frame_.parent;
    if (frame_.parent == nullptr) handoff::detail::run_queued();
  }

 private:
  handoff::detail::drain_frame frame_;
};

// A step's reply that peeked a batch (status 1) has at least this many elements: status,
// dead letters, the state's id and value, then an element and its delivery count each.
constexpr std::size_t batch_reply_min = 6;
constexpr std::size_t batch_from = 4;

}  // namespace

long long actor_core::settle(const actor_names& n, const redisReply& r) const {
  const std::string what = describe("drain of", n.key);
  if (r.type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + what + ": " + std::string(r.str, r.len));
  if (r.type != REDIS_REPLY_ARRAY || r.elements < 2 || r.element[0]->type != REDIS_REPLY_INTEGER ||
      r.element[1]->type != REDIS_REPLY_INTEGER) {
    unexpected(what);
  }
  const long long status = r.element[0]->integer;
  if (const long long dead = r.element[1]->integer; dead > 0) {
    std::string why = "handoff::redis: " + what + ": ";
    why += std::to_string(dead);
    why += " message(s) moved to the dead letters after ";
    why += attempts;
    why += " deliveries";
    report(n.key, std::make_exception_ptr(error(why)));
  }
  if (status == -1) throw error("handoff::redis: " + what + ": ownership lost (lease ran out) before the dequeue");
  if (status == 1 && (r.elements < batch_reply_min || (r.elements - batch_from) % 2 != 0)) unexpected(what);
  if (status < 0 || status > 2) unexpected(what);
  return status;
}

void actor_core::drain(const actor_names& n, const std::string& token, const first_delivery* first,
                       const std::shared_ptr<reply>& resumed, bool defer) noexcept {
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
    reply r;  // the last step's reply, which `batch` and `last_id` point into
    std::vector<message> batch;
    // The state a handler sees (remember_handled): the last step's, then what the batch's
    // handlers set, committed with their dequeue by the next step.
    std::string_view last_id;
    std::string_view state;
    std::string new_state;
    bool has_state = false;
    // The batch a status-1 step reply (settle()) delivered, into r.
    const auto take_batch = [&] {
      last_id = text(*r->element[2]);
      state = text(*r->element[3]);
      new_state.clear();
      has_state = false;
      for (std::size_t i = batch_from; i < r->elements; i += 2) {
        const auto [id, body] = split(text(*r->element[i]), what);
        batch.push_back({id, body, static_cast<std::uint32_t>(r->element[i + 1]->integer)});
      }
    };
    if (first != nullptr) {  // the post that won the actor delivered its own message
      batch.push_back({first->id, first->body, 1});
      last_id = first->last_id;
      state = first->state;
    } else if (resumed != nullptr) {  // a deferred step peeked the next batch (run_steps)
      r = std::move(*resumed);
      take_batch();
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
      if (!spent) spent = budget_spent();  // after a throw too: no batch is peeked just to be handed on
      const char* mode = !spent ? "next" : a.executor ? "keep" : "announce";
      // The next batch: no more than the message budget has left.
      const std::uint32_t size =
          a.max_messages == 0 ? a.batch : std::min(a.batch, a.max_messages - std::min(ran, a.max_messages));
      const std::size_t started = handled + (threw ? 1 : 0);
      std::vector<std::string> call{"6",
                                    n.mailbox,
                                    n.owner,
                                    n.delivered,
                                    n.pending,
                                    n.dead,
                                    n.state,
                                    token,
                                    lease_px,
                                    std::to_string(handled),
                                    std::string(handled != 0 ? batch.front().id : std::string_view()),
                                    std::string(handled != 0 ? batch[handled - 1].id : std::string_view()),
                                    mode,
                                    attempts,
                                    n.key,
                                    std::to_string(size == 0 ? 0 : size - 1)};
      // The arguments the script reads only when used (scripts.hpp).
      const std::size_t unrun = batch.size() - started;
      if (unrun != 0 || a.remember_handled) {
        call.insert(call.end(), {threw ? "1" : "0", std::to_string(unrun)});
        if (a.remember_handled) call.insert(call.end(), {"1", has_state ? "1" : "0", new_state});
      }
      if (defer) {
        // The batch ran: the step goes to the executor with the other actors' (one round
        // trip for all), and a post's caller returns now.
        defer_step({n, token, std::move(call)});
        return;
      }
      router::outcome next = [&] {
        std::vector<std::vector<std::string>> calls;
        calls.push_back(std::move(call));
        return std::move(servers.eval_each(step_script, calls, what).front());
      }();
      if (next.failed != nullptr) std::rethrow_exception(next.failed);
      batch.clear();
      r = std::move(next.r);
      const long long status = settle(n, *r);
      if (status == 0) return;
      if (status == 2) {
        if (a.executor) queue_drain(n, token);
        return;
      }
      take_batch();
    }
  } catch (...) {
    // The actor stays owned until its lease runs out; then a sweeper takes it over.
    report(n.key, std::current_exception());
  }
}

void actor_core::defer_step(deferred_step s) {
  // Registered until its reply is settled, so that the renewer keeps the lease meanwhile.
  register_drain(s.token, s.n.key);
  bool start = false;
  {
    const std::lock_guard<std::mutex> lock(steps.mu);
    steps.waiting.push_back(std::move(s));
    start = !steps.queued;
    steps.queued = true;
  }
  if (!start) return;  // the queued run_steps job takes it
  try {
    handoff::execute(a.executor, [self = shared_from_this()] { self->run_steps(); });
  } catch (...) {
    // The executor refused the job (out of memory, say). Nobody will send the steps
    // waiting: their actors stay owned until their leases run out, as after any failure
    // of a drain; then a sweeper takes them over and runs their messages again.
    std::vector<deferred_step> dropped;
    {
      const std::lock_guard<std::mutex> lock(steps.mu);
      dropped.swap(steps.waiting);
      steps.queued = false;
    }
    for (const deferred_step& d : dropped) {
      report(d.n.key, std::current_exception());
      unregister_drain(d.token);
    }
  }
}

void actor_core::run_steps() noexcept {
  // An executor may run a job inline, inside execute(): the next round's job would then
  // nest a frame per round. The nested call only tells this one to go on instead.
  const std::thread::id self = std::this_thread::get_id();
  {
    const std::lock_guard<std::mutex> lock(steps.mu);
    if (steps.runner == self) {
      steps.nested = true;
      return;
    }
    steps.runner = self;
  }
  struct done {
    actor_core& core;
    explicit done(actor_core& c) : core(c) {}
    done(const done&) = delete;
    done& operator=(const done&) = delete;
    ~done() {
      const std::lock_guard<std::mutex> lock(core.steps.mu);
      // A pool may have started the next round's job on another thread already.
      if (core.steps.runner == std::this_thread::get_id()) core.steps.runner = std::thread::id();
    }
  } const end(*this);
  for (;;) {
    std::vector<deferred_step> sent;
    {
      const std::lock_guard<std::mutex> lock(steps.mu);
      if (steps.waiting.empty()) {
        steps.queued = false;
        return;
      }
      sent.swap(steps.waiting);
    }
    // One round: every step in one write; then every actor with more messages runs its
    // next batch here and defers its next step to the next round.
    std::vector<router::outcome> replies;
    try {
      std::vector<std::vector<std::string>> calls;
      calls.reserve(sent.size());
      for (deferred_step& s : sent) calls.push_back(std::move(s.call));
      replies = servers.eval_each(step_script, calls, "steps of the actors' posts");
    } catch (...) {
      // Out of memory. Each actor stays owned until its lease runs out; then a post or a
      // sweeper takes over.
      for (const deferred_step& s : sent) report(s.n.key, std::current_exception());
    }
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const deferred_step& s = sent[i];
      try {
        // A failed round trip: as for a throwing eval, the lease runs out, then a takeover.
        if (replies[i].failed != nullptr) std::rethrow_exception(replies[i].failed);
        const long long status = settle(s.n, *replies[i].r);
        if (status == 2) queue_drain(s.n, s.token);
        if (status == 1) drain(s.n, s.token, nullptr, std::make_shared<reply>(std::move(replies[i].r)), true);
      } catch (...) {
        report(s.n.key, std::current_exception());
      }
    }
    for (const deferred_step& s : sent) unregister_drain(s.token);
    {
      // Another round as a job of its own, so that the executor's other jobs run between.
      const std::lock_guard<std::mutex> lock(steps.mu);
      if (steps.waiting.empty()) {
        steps.queued = false;
        return;
      }
    }
    try {
      handoff::execute(a.executor, [core = shared_from_this()] { core->run_steps(); });
      const std::lock_guard<std::mutex> lock(steps.mu);
      if (!std::exchange(steps.nested, false)) return;  // queued: it runs after this job
    } catch (...) {  // NOLINT(bugprone-empty-catch): refused: the next round runs here
    }
  }
}

}  // namespace handoff::redis::detail
