// handoff::redis::actor_system: the owner's drain loop (drain.hpp): batches peeked, run in
// order and dequeued by the step script (scripts.hpp).
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
#include "scripts.hpp"

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

long long drainer::settle(const actor_names& n, const redisReply& r) const {
  const std::string what = describe("drain of", n.key);
  if (r.type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + what + ": " + std::string(text(r)));
  if (r.type != REDIS_REPLY_ARRAY || r.elements < 2 || r.element[0]->type != REDIS_REPLY_INTEGER ||
      r.element[1]->type != REDIS_REPLY_INTEGER) {
    unexpected(what);
  }
  const long long status = r.element[0]->integer;
  if (const long long dead = r.element[1]->integer; dead > 0) {
    std::string why = "handoff::redis: " + what + ": ";
    why += std::to_string(dead);
    why += " message(s) moved to the dead letters after ";
    why += core_.settings.attempts;
    why += " deliveries";
    core_.report(n.key, std::make_exception_ptr(error(why)));
  }
  if (status == -1) throw error("handoff::redis: " + what + ": ownership lost (lease ran out) before the dequeue");
  if (status == 1 && (r.elements < batch_reply_min || (r.elements - batch_from) % 2 != 0)) unexpected(what);
  if (status < 0 || status > 2) unexpected(what);
  return status;
}

void drainer::drain(const actor_names& n, const std::string& token, const first_delivery* first,
                    const std::shared_ptr<reply>& resumed, bool defer, drain_budget budget) noexcept {
  struct registration {
    actor_core& core;
    const std::string& token;
    registration(actor_core& c, const actor_names& names, const std::string& t) : core(c), token(t) {
      core.background.register_drain(token, names.key);
    }
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
    ~registration() { core.background.unregister_drain(token); }
  };
  // One message of the batch the last step (or the post) delivered: views into its reply.
  struct message {
    std::string_view id, body;
    std::uint32_t attempt;
  };
  try {
    const actor_options& a = core_.a;
    const registration reg(core_, n, token);
    const std::string what = describe("drain of", n.key);
    // 0: no budget, as for handoff::actor_options.
    const std::int64_t budget_end = budget.end != 0 ? budget.end
                                    : a.max_time.count() == 0
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
    } else if (resumed != nullptr) {  // a deferred step peeked the next batch (rounds.cpp)
      r = std::move(*resumed);
      take_batch();
    }
    std::uint32_t ran = budget.ran;
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
          const auto h = core_.handlers.find(n.key);
          if (h == nullptr) throw error("handoff::redis: " + what + ": no handler for this key in this process");
          const handler_frame frame;
          (*h)(d);
        } catch (...) {
          core_.report(n.key, std::current_exception());  // delivered again, until max_attempts
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
      actor_scripts::step_args args;
      args.token = token;
      args.lease_px = core_.settings.lease_px;
      args.handled = handled;
      if (handled != 0) {
        args.first_id = batch.front().id;
        args.last_id = batch[handled - 1].id;
      }
      args.mode = mode;
      args.attempts = core_.settings.attempts;
      args.batch = size;
      args.unrun = batch.size() - started;
      args.threw = threw;
      args.remember_handled = a.remember_handled;
      args.has_state = has_state;
      args.state = new_state;
      std::vector<std::string> call = args.call(n);
      if (defer) {
        // The batch ran: the step goes to the rounds with the other actors' (one round
        // trip for all), and a post's caller returns now.
        core_.rounds.defer({n, token, std::move(call), {ran, budget_end}});
        return;
      }
      router::outcome next = [&] {
        std::vector<std::vector<std::string>> calls;
        calls.push_back(std::move(call));
        return std::move(core_.servers.eval_each(core_.step_script, calls, what).front());
      }();
      if (next.failed != nullptr) std::rethrow_exception(next.failed);
      batch.clear();
      r = std::move(next.r);
      const long long status = settle(n, *r);
      if (status == 0) return;
      if (status == 2) {
        if (a.executor) core_.queue_drain(n, token);
        return;
      }
      take_batch();
    }
  } catch (...) {
    // The actor stays owned until its lease runs out; then a sweeper takes it over.
    core_.report(n.key, std::current_exception());
  }
}

}  // namespace handoff::redis::detail
