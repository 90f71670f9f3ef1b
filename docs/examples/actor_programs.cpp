// The actor-program section of docs/getting-started.md, compiled and checked (the
// `example_getting_started_snippets` test compares the guide's copies with the marked
// snippets here): handlers that take their actor, messages that name their actor type,
// defer(), callables on a thread_pool, a recursive fan-out, work spread over a pool, and
// options given as a null pointer.
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "expect.hpp"

using example::expect;

namespace {

// [snippet:self]
struct countdown_state {
  std::vector<int> seen;
};

void count_down(handoff::actor<countdown_state>& a, int from) {
  a.post([from](countdown_state& s, handoff::actor<countdown_state>& self) {
    s.seen.push_back(from);
    if (from > 0) count_down(self, from - 1);  // to itself: runs after this handler, no recursion
  });
}
// [/snippet]

void self_example() {
  handoff::actor<countdown_state> a;
  count_down(a, 3);
  expect(a.ask([](countdown_state& s) { return s.seen; }).get() == std::vector<int>{3, 2, 1, 0},
         "a handler reaches its own actor through its second parameter");
}

// [snippet:request_reply]
struct bank;
struct bank_msg;
using bank_actor = handoff::basic_actor<bank_msg, bank>;  // both types still incomplete here

struct bank_msg {
  long amount;
  bank_actor* reply_to;  // a request names the actor that gets the reply; nullptr: a reply
};

struct bank {
  long balance = 0;
  std::vector<long>* receipts;
  void operator()(bank_msg m) {  // or (bank_msg m, bank_actor& self): it may take its actor
    if (m.reply_to == nullptr) return receipts->push_back(m.amount);
    balance += m.amount;
    m.reply_to->send(bank_msg{balance, nullptr});
  }
};
// [/snippet]

void request_reply_example() {
  std::vector<long> teller_receipts, vault_receipts;
  bank_actor vault{bank{0, &vault_receipts}};
  bank_actor teller{bank{0, &teller_receipts}};
  vault.send(bank_msg{100, &teller});
  vault.send(bank_msg{-30, &teller});
  expect(teller_receipts == std::vector<long>{100, 70}, "the replies reach the actor named in the requests");
}

void defer_example() {
  // [snippet:defer]
  std::vector<std::unique_ptr<handoff::actor<int>>> players;
  std::atomic<int> created{0};
  for (int i = 0; i < 100; ++i) {
    players.push_back(std::make_unique<handoff::actor<int>>(0));
    players.back()->defer([&created](int& seen) { seen = created.load(); });  // queued, not run
    created.fetch_add(1);
  }
  handoff::run_deferred();  // now every start message runs, each seeing all 100 actors created
  // [/snippet]
  for (auto& p : players) expect(p->ask([](int& seen) { return seen; }).get() == 100, "defer runs later");
}

void pool_callable_example() {
  // [snippet:pool_callable]
  handoff::thread_pool pool(2);
  std::promise<std::string> reply;
  auto request = std::make_unique<std::string>("ping");  // a move-only capture
  pool.execute([request = std::move(request), &reply] { reply.set_value(*request + " pong"); });
  // [/snippet]
  expect(reply.get_future().get() == "ping pong", "a move-only lambda runs on the pool");
}

// [snippet:fan_out]
// Fibonacci with an actor per call: each call starts two child actors and waits for their
// answers. The sends a handler makes run right after it, before older work: the tree is
// walked depth-first, so only one path of it is alive at a time.
struct fib_call {
  fib_call(handoff::actor<fib_call>* p, int k, long* r) : parent(p), n(k), result(r) {}
  handoff::actor<fib_call>* parent;  // the state names its own actor type
  int n;
  long* result;
  long sum = 0;
  int pending = 2;
};

void answer(fib_call& s, handoff::actor<fib_call>& self, long value) {
  if (s.parent == nullptr) {
    *s.result = value;
    return;
  }
  s.parent->post([value](fib_call& p, handoff::actor<fib_call>& parent) {
    p.sum += value;
    if (--p.pending == 0) answer(p, parent, p.sum);
  });
  delete &self;  // from its own handler: allowed, nothing is queued behind it
}

void start(fib_call& s, handoff::actor<fib_call>& self) {
  if (s.n < 2) return answer(s, self, s.n);
  for (int k : {1, 2}) (new handoff::actor<fib_call>(&self, s.n - k, s.result))->post(start);
}
// [/snippet]

void fan_out_example() {
  long result = 0;
  handoff::actor<fib_call> root(nullptr, 20, &result);
  root.post(start);
  expect(result == 6765, "fib(20) with an actor per call");
}

void spreading_example() {
  // [snippet:spreading]
  handoff::thread_pool pool(2);
  handoff::actor_options options;
  options.executor = pool;  // no budget: an owner keeps draining; idle workers take queued rooms
  auto on_pool = std::make_shared<const handoff::actor_options>(std::move(options));
  std::vector<std::unique_ptr<handoff::actor<std::thread::id>>> rooms;
  for (int i = 0; i < 40; ++i) rooms.push_back(std::make_unique<handoff::actor<std::thread::id>>(on_pool));
  std::latch done(40);
  handoff::actor<int> lobby{on_pool, 0};
  lobby.defer([&](int&) {  // runs on a worker, which wins the 40 idle rooms below
    for (auto& room : rooms) {
      room->post([&](std::thread::id& ran_on) {  // heavy work: while the other worker is idle,
        ran_on = std::this_thread::get_id();     // rooms queued here are handed to it
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
        while (std::chrono::steady_clock::now() < until) {
        }
        done.count_down();
      });
    }
  });
  done.wait();
  // [/snippet]
  std::vector<std::thread::id> ids;
  for (auto& room : rooms) ids.push_back(room->ask([](std::thread::id& t) { return t; }).get());
  bool two = false;
  for (const auto& id : ids) two = two || id != ids.front();
  expect(two, "the rooms ran on both workers");
}

void null_options_example() {
  // [snippet:null_options]
  std::shared_ptr<const handoff::actor_options> maybe_options;  // configured elsewhere, or not
  handoff::actor<int> a{maybe_options, 0};                      // null: the same as no options
  // [/snippet]
  a.post([](int& v) { ++v; });
  expect(a.ask([](int& v) { return v; }).get() == 1, "a null options pointer means no options");
}

}  // namespace

int main() {
  self_example();
  request_reply_example();
  defer_example();
  pool_callable_example();
  fan_out_example();
  spreading_example();
  null_options_example();
}
