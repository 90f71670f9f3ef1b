// handoff::redis::actor_system against a real redis-server (redis_server.hpp): the hand-off
// across processes (redis_actor_helper), crashes of owners and senders, the budget, dead
// letters, the state committed with the dequeue, limits, odd keys and a failing server;
// where a post made inside other work of the library (an in-process handler, a keyed-mutex
// callback, a resumed coroutine, a Redis handler) drains the actor it wins.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "redis_actor_check.hpp"
#include "redis_server.hpp"
#include "redis_test_support.hpp"

#ifndef HANDOFF_REDIS_ACTOR_HELPER
#error "HANDOFF_REDIS_ACTOR_HELPER: the path of redis_actor_helper (tests/CMakeLists.txt)"
#endif

namespace {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
using handoff::test::eventually;
using handoff::test::helper_process;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::steady;

// Short leases, so that crash recovery takes a fraction of a second.
constexpr auto test_lease = 300ms;

hr::options at(int port) {
  hr::options o;
  o.port = port;
  return o;
}

hr::actor_options quick() {
  hr::actor_options a;
  a.lease = handoff::lease{test_lease};
  a.sweep_interval = 20ms;
  return a;
}

std::unique_ptr<helper_process> helper(std::vector<std::string> args) {
  return std::make_unique<helper_process>(HANDOFF_REDIS_ACTOR_HELPER, std::move(args));
}

std::vector<std::string> log_of(raw_redis& raw, const std::string& key) {
  return raw.strings({"LRANGE", "t:log:" + key, "0", "-1"});
}

// Blocks handlers until open() (a handler that is "still running").
struct latch {
  std::promise<void> p;
  std::shared_future<void> f = p.get_future().share();
  void wait() const { f.wait(); }
  void open() { p.set_value(); }
};

// An owner of "q:1" that is still running the handler of its first message, m0, on a
// thread of its own, until release(): what is posted meanwhile stays in the mailbox.
struct busy_owner {
  explicit busy_owner(hr::actor_system& a) : actors(a) {
    actors.on("q:", [this](hr::delivery& d) {
      if (d.body() == "m0") gate.wait();
    });
    owner = std::thread([this] { actors.post("q:1", "m0"); });
    EXPECT_TRUE(eventually([this] { return actors.pending("q:1") == 1; }));
  }
  busy_owner(const busy_owner&) = delete;
  busy_owner& operator=(const busy_owner&) = delete;
  ~busy_owner() { release(); }
  void release() {
    if (!owner.joinable()) return;
    gate.open();
    owner.join();
  }
  hr::actor_system& actors;
  latch gate;
  std::thread owner;
};

// A server, the tests' plain view of it, and this process's actor_system, whose handler
// records every run (redis_actor_check.hpp) and whose sweeper takes over what others leave.
struct recorded {
  explicit recorded(std::vector<std::string> server_args = {}, const hr::actor_options& a = quick())
      : server(std::move(server_args)), port(server.port()), raw(port), actors(at(port), a) {
    actors.on("", [p = port](hr::delivery& d) { handoff::test::record_run(p, d); });
  }
  redis_server server;
  int port;
  raw_redis raw;
  hr::actor_system actors;
};

TEST(RedisActor, a_post_to_an_idle_actor_runs_its_handler_on_the_posting_thread_and_leaves_no_keys) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  std::thread::id ran_on;
  std::string seen;
  std::uint32_t attempt = 0;
  actors.on("room:", [&](hr::delivery& d) {
    ran_on = std::this_thread::get_id();
    seen = std::string(d.key()) + "/" + std::string(d.body());
    attempt = d.attempt();
  });
  const std::string id = actors.post("room:7", "join alice");
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(seen, "room:7/join alice");
  EXPECT_EQ(attempt, 1U);
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(actors.pending("room:7"), 0U);
  raw_redis raw(server.port());
  EXPECT_EQ(raw.strings({"KEYS", "*"}), std::vector<std::string>{"handoff:format"})
      << "a released actor leaves nothing on the server but the prefix's format marker";
}

TEST(RedisActor, messages_of_one_key_run_one_at_a_time_and_in_sender_order_across_processes) {
  recorded t;  // its sweeper continues what the helpers hand on
  const int port = t.port;
  raw_redis& raw = t.raw;
  constexpr int senders = 4;
  constexpr int count = 150;  // half to the shared key, half to the sender's own
  std::vector<std::unique_ptr<helper_process>> procs;
  procs.reserve(senders);
  for (int p = 0; p < senders; ++p) {
    procs.push_back(helper({std::to_string(port), "300", "send", "p" + std::to_string(p), std::to_string(count),
                            "room:shared", "room:" + std::to_string(p)}));
  }
  for (auto& p : procs) EXPECT_EQ(p->wait(60s), 0);
  ASSERT_TRUE(eventually(
      [&] {
        return raw.integer({"LLEN", "t:log:room:shared"}) == senders * count / 2;
      },
      20s))
      << raw.integer({"LLEN", "t:log:room:shared"});
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:shared"), &seen), "");
  for (int p = 0; p < senders; ++p) {
    const std::string key = "room:" + std::to_string(p);
    ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:log:" + key}) == count / 2; }, 20s));
    EXPECT_EQ(handoff::test::check_log(log_of(raw, key), &seen), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(senders * count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message << " ran more than once without a crash";
}

TEST(RedisActor, an_owner_killed_mid_handler_loses_no_message_and_its_rerun_is_flagged) {
  recorded t;
  const int port = t.port;
  raw_redis& raw = t.raw;
  hr::actor_system& actors = t.actors;
  const auto owner = helper({std::to_string(port), "300", "hang", "room:9"});
  ASSERT_TRUE(eventually([&] { return raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  for (int i = 0; i < 3; ++i) actors.post("room:9", "t " + std::to_string(i));  // queued behind the owner
  EXPECT_TRUE(log_of(raw, "room:9").empty()) << "handled while the owner's lease was live";
  const auto killed = steady::now();
  owner->kill();  // SIGKILL mid-handler
  ASSERT_TRUE(eventually([&] { return log_of(raw, "room:9").size() == 4; }, 10s));
  EXPECT_GE(since(killed), test_lease - 50ms) << "taken over before the owner's lease ran out";
  EXPECT_EQ(handoff::test::runs_of(log_of(raw, "room:9")),
            (std::vector<std::string>{"hang 0 2", "t 0 1", "t 1 1", "t 2 1"}));
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:9"), nullptr), "");
}

TEST(RedisActor, a_post_queues_behind_a_dead_owner_and_only_a_sweep_takes_the_actor_over) {
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;  // this process sweeps only when told to
  recorded t({}, a);
  const auto owner = helper({std::to_string(t.port), "300", "hang", "room:9"});
  ASSERT_TRUE(eventually([&] { return t.raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  owner->kill();                                    // SIGKILL mid-handler
  std::this_thread::sleep_for(test_lease + 100ms);  // its lease has run out
  t.actors.post("room:9", "t 0");
  EXPECT_TRUE(log_of(t.raw, "room:9").empty()) << "a post took over an actor that still had messages";
  EXPECT_EQ(t.actors.pending("room:9"), 2U) << "the dead owner's message and the post's";
  EXPECT_EQ(t.actors.sweep(), 1U);
  EXPECT_EQ(handoff::test::runs_of(log_of(t.raw, "room:9")), (std::vector<std::string>{"hang 0 2", "t 0 1"}));
  EXPECT_EQ(t.actors.pending("room:9"), 0U);
  EXPECT_EQ(t.actors.sweep(), 0U) << "nothing left to take over";
}

TEST(RedisActor, an_owner_busy_for_several_leases_keeps_its_actor_while_its_process_renews_the_lease) {
  redis_server server;
  hr::actor_options a = quick();  // a lease of 300 ms, a sweep every 20 ms
  a.batch = 1;
  a.max_messages = 0;  // one drain runs the whole backlog
  a.max_time = 0ns;
  std::atomic<int> errors{0};
  a.on_error = [&](std::string_view, const std::exception_ptr&) { errors.fetch_add(1); };
  hr::actor_system owner(at(server.port()), a);
  hr::actor_system rival(at(server.port()), a);  // its sweeper takes the actor if the lease lapses
  std::mutex mu;
  std::vector<std::string> runs;  // "<body> <attempt>"
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  const auto handler = [&](hr::delivery& d) {
    if (inside.fetch_add(1) != 0) overlapped = true;
    {
      const std::lock_guard<std::mutex> lock(mu);
      runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    }
    std::this_thread::sleep_for(60ms);
    inside.fetch_sub(1);
  };
  owner.on("b:", handler);
  rival.on("b:", handler);
  constexpr int messages = 15;                          // 0.9 s of handlers: three leases
  std::thread first([&] { owner.post("b:1", "m0"); });  // wins the actor, drains everything
  ASSERT_TRUE(eventually([&] { return inside.load() == 1; }));
  for (int i = 1; i < messages; ++i) rival.post("b:1", "m" + std::to_string(i));  // queued behind it
  first.join();
  std::vector<std::string> want;
  for (int i = 0; i < messages; ++i) want.push_back("m" + std::to_string(i) + " 1");
  EXPECT_EQ(runs, want) << "each message once, in order, by the one owner";
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(errors.load(), 0) << "the owner lost its lease";
  EXPECT_EQ(owner.pending("b:1"), 0U);
}

TEST(RedisActor, an_owner_killed_mid_batch_re_runs_what_it_had_not_dequeued_flagged_and_commits_state_once) {
  redis_server server;
  const int port = server.port();
  raw_redis raw(port);
  hr::actor_options silent = quick();
  silent.sweep_interval = 0ms;
  hr::actor_system poster(at(port), silent);  // no handlers: its posts announce the actor
  for (int i = 0; i < 6; ++i) poster.post("room:5", "b " + std::to_string(i));
  // Takes the actor over, peeks all six as one batch, runs b 0 and b 1, hangs in b 2.
  const auto owner = helper({std::to_string(port), "300", "take", "b 2"});
  ASSERT_TRUE(eventually([&] { return raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  poster.post("room:5", "t 0");  // behind the peeked batch
  owner->kill();
  hr::actor_options a = quick();
  a.remember_handled = true;
  hr::actor_system rescuer(at(port), a);
  rescuer.on("", [port](hr::delivery& d) {
    handoff::test::record_run(port, d);
    d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
  });
  ASSERT_TRUE(eventually([&] { return log_of(raw, "room:5").size() == 9; }, 10s)) << log_of(raw, "room:5").size();
  // Nothing of the batch was dequeued when its owner died: all of it runs again, flagged,
  // including the messages the dead owner never started; what came after it is not.
  EXPECT_EQ(
      handoff::test::runs_of(log_of(raw, "room:5")),
      (std::vector<std::string>{"b 0 1", "b 1 1", "b 0 2", "b 1 2", "b 2 2", "b 3 2", "b 4 2", "b 5 2", "t 0 1"}));
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:5"), nullptr), "");
  EXPECT_TRUE(eventually([&] { return rescuer.pending("room:5") == 0; }));
  EXPECT_EQ(raw.string({"HGET", "handoff:{room:5}:actor:state", "value"}), "7")
      << "the state counts each message once: the dead owner's two runs were never committed";
}

TEST(RedisActor, a_handler_that_throws_mid_batch_stops_it_and_the_messages_after_it_are_not_counted_as_delivered) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_attempts = 1;  // a message counted as delivered twice goes to the dead letters
  a.on_error = [](std::string_view, std::exception_ptr) {};
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  std::mutex mu;
  std::vector<std::string> runs;
  actors.on("q:", [&](hr::delivery& d) {
    if (d.body() == "m0") gate.wait();
    const std::lock_guard<std::mutex> lock(mu);
    runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    if (d.body() == "b2") throw std::runtime_error("poison");
  });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  for (int i = 1; i <= 4; ++i) actors.post("q:1", "b" + std::to_string(i));  // one batch after m0
  gate.open();
  owner.join();
  EXPECT_EQ(runs, (std::vector<std::string>{"m0 1", "b1 1", "b2 1", "b3 1", "b4 1"}));
  const std::vector<hr::dead_letter> dead = actors.dead_letters("q:1");
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].body, "b2");
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, a_batch_carries_the_state_from_message_to_message_and_a_spent_time_budget_gives_back_the_rest) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.remember_handled = true;
  a.max_attempts = 1;  // a message counted as delivered without running would be dead-lettered
  a.max_messages = 0;
  a.max_time = 1ms;  // spent after the first message of each batch
  a.executor = pool;
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  std::mutex mu;
  std::vector<std::string> seen;  // "<body> <attempt> <state>"
  std::vector<std::string> ids;   // the ids handled, in order
  std::vector<bool> last_is_previous;
  actors.on("acct:", [&](hr::delivery& d) {
    if (d.body() == "m0") gate.wait();
    std::this_thread::sleep_for(2ms);
    const std::lock_guard<std::mutex> lock(mu);
    last_is_previous.push_back(ids.empty() ? d.last_handled_id().empty() : d.last_handled_id() == ids.back());
    ids.emplace_back(d.id());
    seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " + std::string(d.state()));
    d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
  });
  std::thread owner([&] { actors.post("acct:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("acct:1") == 1; }));
  for (int i = 1; i <= 5; ++i) actors.post("acct:1", "b" + std::to_string(i));
  gate.open();
  owner.join();
  ASSERT_TRUE(eventually([&] { return actors.pending("acct:1") == 0; }));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"m0 1 ", "b1 1 1", "b2 1 2", "b3 1 3", "b4 1 4", "b5 1 5"}));
  EXPECT_EQ(last_is_previous, std::vector<bool>(6, true));
  EXPECT_TRUE(actors.dead_letters("acct:1").empty());
  raw_redis raw(server.port());
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "value"}), "6");
}

TEST(RedisActor, batch_must_be_from_1_to_max_batch) {
  redis_server server;
  hr::actor_options zero = quick();
  zero.batch = 0;
  EXPECT_THROW(hr::actor_system(at(server.port()), zero), std::invalid_argument);
  hr::actor_options over = quick();
  over.batch = hr::actor_options::max_batch + 1;
  EXPECT_THROW(hr::actor_system(at(server.port()), over), std::invalid_argument);
  hr::actor_options one = quick();
  one.batch = 1;
  hr::actor_system actors(at(server.port()), one);
  std::vector<std::string> runs;
  actors.on("", [&](hr::delivery& d) { runs.emplace_back(d.body()); });
  actors.post("k", "a");
  EXPECT_EQ(runs, std::vector<std::string>{"a"});
}

TEST(RedisActor, a_sender_killed_mid_stream_loses_no_accepted_message) {
  recorded t;
  const int port = t.port;
  raw_redis& raw = t.raw;
  hr::actor_system& actors = t.actors;
  const auto sender = helper({std::to_string(port), "300", "send", "s", "1000000", "room:a", "room:b"});
  ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:accepted:s"}) >= 60; }, 20s));
  sender->kill();  // SIGKILL, maybe mid-post, maybe while owning and draining
  const std::vector<std::string> accepted = raw.strings({"LRANGE", "t:accepted:s", "0", "-1"});
  const long long last = std::stoll(accepted.back());
  ASSERT_TRUE(eventually([&] { return actors.pending("room:a") == 0 && actors.pending("room:b") == 0; }, 10s));
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:a"), &seen), "");
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:b"), &seen), "");
  for (long long i = 0; i <= last; ++i)
    EXPECT_GE(seen["s " + std::to_string(i)], 1) << "accepted message " << i << " lost";
}

TEST(RedisActor, a_message_that_keeps_failing_goes_to_the_dead_letters_and_its_actor_moves_on) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_attempts = 3;
  std::atomic<int> errors{0};
  a.on_error = [&](std::string_view, std::exception_ptr) { errors.fetch_add(1); };
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> runs;
  actors.on("job:", [&](hr::delivery& d) {
    runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    if (d.body() == "bad") throw std::runtime_error("poison");
  });
  const std::string bad = actors.post("job:1", "bad");
  actors.post("job:1", "good");
  EXPECT_EQ(runs, (std::vector<std::string>{"bad 1", "bad 2", "bad 3", "good 1"}));
  const std::vector<hr::dead_letter> dead = actors.dead_letters("job:1");
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].id, bad);
  EXPECT_EQ(dead[0].body, "bad");
  EXPECT_EQ(errors.load(), 4) << "three handler failures and the move to the dead letters";
  EXPECT_EQ(actors.pending("job:1"), 0U);
}

TEST(RedisActor, remember_handled_commits_the_state_with_the_dequeue_once_per_message) {
  redis_server server;
  hr::actor_options a = quick();
  a.remember_handled = true;
  a.on_error = [](std::string_view, std::exception_ptr) {};
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> seen;  // "<body> <attempt> <state> <last id is the previous message's>"
  std::vector<std::string> ids;
  actors.on("acct:", [&](hr::delivery& d) {
    const int n = d.state().empty() ? 0 : std::stoi(std::string(d.state()));
    const bool last_is_previous =
        ids.size() < 2 ? d.last_handled_id().empty() : d.last_handled_id() == ids[ids.size() - 2];
    seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " + std::to_string(n) + " " +
                   (last_is_previous ? "prev" : "other"));
    d.set_state(std::to_string(n + 1));
    if (d.body() == "fail-once" && d.attempt() == 1) throw std::runtime_error("after set_state");
  });
  for (const char* body : {"a", "fail-once", "b"}) {
    ids.push_back("");  // the slot of the message being posted
    ids.back() = actors.post("acct:1", body);
  }
  // The failed attempt's state was not committed: the re-run sees the same state and the
  // same last handled id, so it can tell that nothing of the first attempt was kept.
  EXPECT_EQ(seen, (std::vector<std::string>{"a 1 0 prev", "fail-once 1 1 prev", "fail-once 2 1 prev", "b 1 2 prev"}));
  raw_redis raw(server.port());
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "value"}), "3");
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "id"}), ids.back());
}

// Runs m0 on a thread of its own (it owns the actor and blocks in the handler until the
// latch opens), posts m1..m9 behind it through `poster`, opens the latch; returns the
// thread each message ran on, in order.
std::vector<std::thread::id> backlog_run(hr::actor_system& poster, std::vector<hr::actor_system*> handlers,
                                         std::thread::id& owner_thread) {
  latch gate;
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<std::thread::id> threads;
  for (hr::actor_system* s : handlers) {
    s->on("q:", [&](hr::delivery& d) {
      if (d.body() == "m0") gate.wait();
      const std::lock_guard<std::mutex> lock(mu);
      order.emplace_back(d.body());
      threads.push_back(std::this_thread::get_id());
    });
  }
  std::thread owner([&] { poster.post("q:1", "m0"); });
  owner_thread = owner.get_id();
  EXPECT_TRUE(eventually([&] { return poster.pending("q:1") == 1; }));
  for (int i = 1; i < 10; ++i) poster.post("q:1", "m" + std::to_string(i));
  gate.open();
  owner.join();
  EXPECT_TRUE(eventually([&] {
    const std::lock_guard<std::mutex> lock(mu);
    return order.size() == 10;
  }));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}));
  return threads;
}

TEST(RedisActor, with_an_executor_a_posts_owner_runs_only_its_own_message_and_the_executor_the_rest) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.executor = pool;
  a.sweep_interval = 0ms;  // only the executor can continue it
  hr::actor_system actors(at(server.port()), a);
  std::thread::id owner;
  const auto threads = backlog_run(actors, {&actors}, owner);
  ASSERT_EQ(threads.size(), 10U);
  EXPECT_EQ(threads[0], owner);
  for (std::size_t i = 1; i < threads.size(); ++i) {
    EXPECT_NE(threads[i], owner) << "message " << i << " ran on the posting thread";
    EXPECT_NE(threads[i], std::this_thread::get_id());
  }
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

// An executor whose jobs wait until the test runs them, so that a test sees what a post
// leaves to the executor before it runs.
class held_executor {
 public:
  void execute(handoff::work w) {
    const std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(w));
  }
  [[nodiscard]] std::size_t queued() {
    const std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }
  // Runs the jobs queued now and those they queue, until none is left; how many ran.
  std::size_t run_all() {
    std::size_t ran = 0;
    for (;;) {
      handoff::work w;
      {
        const std::lock_guard<std::mutex> lock(mu_);
        if (jobs_.empty()) return ran;
        w = std::move(jobs_.front());
        jobs_.pop_front();
      }
      w();
      ++ran;
    }
  }

 private:
  std::mutex mu_;
  std::deque<handoff::work> jobs_;
};

TEST(RedisActor, a_post_that_wins_an_idle_actor_returns_after_its_handler_and_the_executor_sends_its_dequeue) {
  redis_server server;
  raw_redis raw(server.port());
  held_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 0ms;
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> ran;
  actors.on("room:", [&](hr::delivery& d) { ran.emplace_back(d.body()); });
  for (const char* key : {"room:1", "room:2", "room:3"}) actors.post(key, std::string("hello ") + key);
  EXPECT_EQ(ran, (std::vector<std::string>{"hello room:1", "hello room:2", "hello room:3"}));
  // Handled, not dequeued yet: each actor is still owned, its message still counted.
  for (const char* key : {"room:1", "room:2", "room:3"}) {
    EXPECT_EQ(actors.pending(key), 1U) << key;
    EXPECT_EQ(raw.strings({"KEYS", std::string("*{") + key + "}:actor:owner"}).size(), 1U) << key;
  }
  // The three steps wait in one job, which sends them together and releases every actor.
  EXPECT_EQ(ex.queued(), 1U);
  EXPECT_EQ(ex.run_all(), 1U);
  for (const char* key : {"room:1", "room:2", "room:3"}) EXPECT_EQ(actors.pending(key), 0U) << key;
  EXPECT_EQ(raw.strings({"KEYS", "*actor*"}), std::vector<std::string>{});
  EXPECT_EQ(ran.size(), 3U);  // nothing ran twice
}

TEST(RedisActor, a_message_posted_while_the_owners_dequeue_waits_on_the_executor_runs_there_in_order) {
  redis_server server;
  held_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 0ms;
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::pair<std::string, std::thread::id>> ran;
  actors.on("q:", [&](hr::delivery& d) { ran.emplace_back(d.body(), std::this_thread::get_id()); });
  actors.post("q:1", "m0");  // runs here, its step waits in the executor
  actors.post("q:1", "m1");  // queued behind the owner: returns at once
  actors.post("q:1", "m2");
  ASSERT_EQ(ran.size(), 1U);
  EXPECT_EQ(actors.pending("q:1"), 3U);
  std::thread worker([&] { ex.run_all(); });  // the executor's thread
  const std::thread::id executor_thread = worker.get_id();
  worker.join();
  ASSERT_EQ(ran.size(), 3U);
  EXPECT_EQ(ran[1], std::make_pair(std::string("m1"), executor_thread));
  EXPECT_EQ(ran[2], std::make_pair(std::string("m2"), executor_thread));
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, a_deferred_dequeue_that_finds_the_server_gone_is_reported_and_the_message_runs_again_later) {
  redis_server server({"--appendonly", "yes", "--appendfsync", "always"});
  held_executor ex;
  std::mutex mu;
  std::vector<std::string> errors;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 20ms;
  a.on_error = [&](std::string_view, const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      const std::lock_guard<std::mutex> lock(mu);
      errors.emplace_back(x.what());
    }
  };
  hr::options o = at(server.port());
  o.command_timeout = 200ms;
  hr::actor_system actors(o, a);
  std::atomic<int> runs{0};
  std::atomic<std::uint32_t> last_attempt{0};
  actors.on("q:", [&](hr::delivery& d) {
    last_attempt = d.attempt();
    ++runs;
  });
  actors.post("q:1", "m0");
  EXPECT_EQ(runs.load(), 1);
  server.kill();
  ex.run_all();  // the step cannot be sent: reported, the message stays in the mailbox
  {
    const std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(errors.front().find("handoff::redis"), std::string::npos) << errors.front();
  }
  server.restart();  // the same directory: the append-only file is read back
  // The owner's lease runs out; the sweeper takes the actor over and runs m0 again, flagged.
  std::thread worker([&] {
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (runs.load() < 2 && std::chrono::steady_clock::now() < end) {
      ex.run_all();
      std::this_thread::sleep_for(5ms);
    }
    ex.run_all();
  });
  worker.join();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(last_attempt.load(), 2U);
  EXPECT_TRUE(eventually([&] {
    ex.run_all();
    return actors.pending("q:1") == 0;
  }));
}

TEST(RedisActor, an_executor_that_runs_jobs_inline_sends_the_dequeues_in_rounds_without_nesting) {
  redis_server server;
  // Runs each job inside execute(), on the caller's thread; counts how deep jobs nest.
  struct inline_executor {
    std::atomic<int> depth{0};
    std::atomic<int> deepest{0};
    void execute(handoff::work w) {
      const int d = ++depth;
      int seen = deepest.load();
      while (d > seen && !deepest.compare_exchange_weak(seen, d)) {
      }
      w();
      --depth;
    }
  };
  inline_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  hr::actor_system actors(at(server.port()), a);
  std::mutex mu;
  std::map<std::string, std::vector<int>> seen;  // sender -> its messages in the order run
  actors.on("q:", [&](hr::delivery& d) {
    const std::string body(d.body());
    const auto space = body.find(' ');
    const std::lock_guard<std::mutex> lock(mu);
    seen[body.substr(0, space)].push_back(std::stoi(body.substr(space + 1)));
  });
  constexpr int per_sender = 200;
  std::vector<std::thread> senders;
  for (const char* name : {"a", "b"}) {
    senders.emplace_back([&, name] {
      for (int i = 0; i < per_sender; ++i) actors.post("q:1", std::string(name) + " " + std::to_string(i));
    });
  }
  for (auto& t : senders) t.join();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
  const std::lock_guard<std::mutex> lock(mu);
  for (const char* name : {"a", "b"}) {
    std::vector<int> expected(per_sender);
    for (int i = 0; i < per_sender; ++i) expected[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(seen[name], expected) << name;  // each once, in the order sent
  }
  // A job runs inside execute(), and at most a job inside that one's execute().
  EXPECT_LE(ex.deepest.load(), 2);
}

TEST(RedisActor, a_dequeue_the_executor_refuses_is_reported_and_its_message_runs_again_after_the_lease) {
  redis_server server;
  // Refuses its first job (as an executor out of memory would), then runs jobs on a pool.
  struct refuses_once {
    handoff::thread_pool* pool;
    std::atomic<bool> refused{false};
    void execute(handoff::work w) {
      if (!refused.exchange(true)) throw std::bad_alloc();
      pool->execute(std::move(w));
    }
  };
  handoff::thread_pool pool(1);
  refuses_once ex{&pool};
  std::atomic<int> errors{0};
  hr::actor_options a = quick();
  a.executor = ex;
  a.on_error = [&](std::string_view, const std::exception_ptr&) { ++errors; };
  hr::actor_system actors(at(server.port()), a);
  std::mutex mu;
  std::vector<std::uint32_t> attempts;
  actors.on("q:", [&](hr::delivery& d) {
    const std::lock_guard<std::mutex> lock(mu);
    attempts.push_back(d.attempt());
  });
  actors.post("q:1", "m0");  // runs here; the job that would send its dequeue is refused
  EXPECT_EQ(errors.load(), 1);
  // The lease runs out; the sweeper takes the actor over and runs m0 again, flagged.
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }, 10s));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2}));
}

TEST(RedisActor, a_spent_budget_without_executor_announces_the_actor_and_a_sweeper_continues_it) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_messages = 2;
  a.sweep_interval = 0ms;
  hr::actor_system poster(at(server.port()), a);  // never sweeps
  hr::actor_system sweeper(at(server.port()), quick());
  std::thread::id owner;
  const auto threads = backlog_run(poster, {&poster, &sweeper}, owner);
  ASSERT_EQ(threads.size(), 10U);
  EXPECT_EQ(threads[1], owner);
  for (std::size_t i = 2; i < threads.size(); ++i) {
    EXPECT_NE(threads[i], owner);
    EXPECT_NE(threads[i], std::this_thread::get_id());
  }
}

TEST(RedisActor, a_post_from_inside_a_redis_handler_drains_the_won_actor_on_the_same_thread_after_that_handler) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  bool in_a = false;
  std::vector<std::pair<std::thread::id, bool>> b_runs;  // (thread, inside a's handler)
  actors.on("a:", [&](hr::delivery&) {
    in_a = true;
    actors.post("b:1", "from a");
    in_a = false;
  });
  actors.on("b:", [&](hr::delivery&) { b_runs.emplace_back(std::this_thread::get_id(), in_a); });
  actors.post("a:1", "go");
  ASSERT_EQ(b_runs.size(), 1U) << "b's message did not run on this thread before the post returned";
  EXPECT_EQ(b_runs[0].first, std::this_thread::get_id());
  EXPECT_FALSE(b_runs[0].second) << "the nested post drained inside a's handler";
  EXPECT_EQ(actors.pending("b:1"), 0U);
}

// A server and an actor_system whose handler records, for each run, its thread and
// whether `inside` was set then.
struct inside_probe {
  inside_probe() {
    actors.on("r:", [this](hr::delivery&) {
      const std::lock_guard<std::mutex> lock(mu);
      runs.emplace_back(std::this_thread::get_id(), inside.load());
    });
  }
  redis_server server;
  hr::actor_system actors{at(server.port()), quick()};
  std::atomic<bool> inside{false};
  std::mutex mu;
  std::vector<std::pair<std::thread::id, bool>> runs;  // guarded by mu
  // The work the post runs inside: sets `inside` around the post.
  void post_inside() {
    inside = true;
    actors.post("r:1", "x");
    inside = false;
  }
  void expect_one_run_here_after_the_work() {
    const std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(runs.size(), 1U) << "the message did not run exactly once on this thread";
    EXPECT_EQ(runs[0].first, std::this_thread::get_id());
    EXPECT_FALSE(runs[0].second) << "the Redis handler ran nested inside the work that posted";
  }
};

TEST(RedisActor, a_post_from_an_in_process_actors_handler_drains_after_that_handler_on_the_same_thread) {
  inside_probe probe;
  handoff::actor<int> local{0};
  local.post([&](int&) { probe.post_inside(); });  // at top level: runs here, then the queue
  probe.expect_one_run_here_after_the_work();
  EXPECT_EQ(probe.actors.pending("r:1"), 0U);
}

TEST(RedisActor, a_post_from_a_keyed_mutex_callback_drains_after_that_callback_on_the_same_thread) {
  inside_probe probe;
  handoff::keyed_mutex<std::string> m;
  m.lock_async("k", [&](auto /*guard*/) { probe.post_inside(); });  // free key: runs here
  probe.expect_one_run_here_after_the_work();
}

TEST(RedisActor, a_post_from_a_coroutine_the_library_resumed_drains_after_it_on_the_same_thread) {
  inside_probe probe;
  handoff::keyed_mutex<std::string> m;
  auto held = m.lock("k");
  [](handoff::keyed_mutex<std::string>& mx, inside_probe& p) -> handoff::test::fire_and_forget {
    auto g = co_await mx.async_lock("k");  // resumed inside held.unlock() below
    p.post_inside();
  }(m, probe);
  held.unlock();
  probe.expect_one_run_here_after_the_work();
}

TEST(RedisActor, post_for_on_a_full_mailbox_inside_a_handler_first_runs_what_this_thread_has_queued) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 1;
  hr::actor_system actors(at(server.port()), a);
  std::atomic<bool> queued_ran{false};
  std::atomic<bool> seen_by_owner{false};
  actors.on("q:", [&](hr::delivery& d) {
    // The owner's m0 keeps the mailbox full until the work queued on the poster's thread ran.
    if (d.body() == "m0") seen_by_owner = eventually([&] { return queued_ran.load(); }, 300ms);
  });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  handoff::actor<int> x{0};
  handoff::actor<int> y{0};
  x.post([&](int&) {
    y.post([&](int&) { queued_ran = true; });  // idle: queued on this thread, after x's handler
    actors.post_for("q:1", "m1", 10s);
  });
  owner.join();
  EXPECT_TRUE(seen_by_owner.load()) << "post_for slept while this thread's queue held y";
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

TEST(RedisActor, a_post_from_a_process_without_a_handler_for_the_key_is_handled_by_one_that_has_it) {
  redis_server server;
  hr::actor_system sender(at(server.port()), quick());  // handles "other:" only
  sender.on("other:", [](hr::delivery&) { ADD_FAILURE() << "wrong family"; });
  hr::actor_system worker(at(server.port()), quick());
  std::promise<std::string> got;
  worker.on("job:", [&](hr::delivery& d) { got.set_value(std::string(d.body())); });
  sender.post("job:1", "payload");
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "announced, but no sweeper took it";
  EXPECT_EQ(f.get(), "payload");
  EXPECT_TRUE(eventually([&] { return sender.pending("job:1") == 0; }));
}

// Delayed posts: the log's tag of each message is the steady_clock time (ns) before which
// it must not run, taken before post_after was called.
std::string due_tag(std::chrono::milliseconds delay) {
  return std::to_string(handoff::test::monotonic_ns() + std::chrono::nanoseconds(delay).count());
}

// Every run in `log` started at or after the time its tag names; "" if so.
std::string early_runs(const std::vector<std::string>& log) {
  std::string out;
  for (const std::string& entry : log) {
    std::istringstream in(entry);
    long long due = 0;
    long long seq = 0;
    long long attempt = 0;
    long long start = 0;
    if (!(in >> due >> seq >> attempt >> start)) return "malformed entry: " + entry;
    if (start < due) out += entry + " ran " + std::to_string(due - start) + " ns early; ";
  }
  return out;
}

TEST(RedisActor, a_delayed_post_waits_outside_the_mailbox_and_runs_once_at_or_after_its_delay) {
  recorded t;
  const auto t0 = steady::now();
  const std::string tag = due_tag(300ms);
  const std::string id = t.actors.post_after("late:1", tag + " 0", 300ms);
  EXPECT_FALSE(id.empty());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(t.actors.pending("late:1"), 0U) << "a delayed message is in no mailbox before it is due";
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:1").size() == 1; }, 10s));
  EXPECT_GE(since(t0), 300ms);
  EXPECT_EQ(early_runs(log_of(t.raw, "late:1")), "");
  EXPECT_EQ(handoff::test::runs_of(log_of(t.raw, "late:1")), (std::vector<std::string>{tag + " 0 1"}));
  std::this_thread::sleep_for(100ms);  // a few sweeps: it is not moved twice
  EXPECT_EQ(log_of(t.raw, "late:1").size(), 1U);
  EXPECT_FALSE(t.actors.cancel_delayed("late:1", id)) << "moved and run: nothing to cancel";
  EXPECT_EQ(t.raw.integer({"EXISTS", "handoff:actors:delayed", "handoff:actors:delayed:body"}), 0)
      << "nothing left once it moved";
}

TEST(RedisActor, post_at_runs_a_message_at_or_after_a_wall_clock_time) {
  recorded t;
  const std::string tag = due_tag(250ms);
  t.actors.post_at("late:2", tag + " 0", std::chrono::system_clock::now() + 250ms);
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:2").size() == 1; }, 10s));
  EXPECT_EQ(early_runs(log_of(t.raw, "late:2")), "");
}

TEST(RedisActor, cancel_delayed_stops_a_message_before_it_is_due_and_only_for_its_own_key) {
  recorded t;
  const std::string keep = t.actors.post_after("late:3", due_tag(200ms) + " 0", 200ms);
  const std::string drop = t.actors.post_after("late:3", due_tag(200ms) + " 1", 200ms);
  EXPECT_FALSE(t.actors.cancel_delayed("late:4", drop)) << "another key's message";
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", "no-such-id"));
  EXPECT_TRUE(t.actors.cancel_delayed("late:3", drop));
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", drop)) << "cancelled twice";
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:3").size() == 1; }, 10s));
  std::this_thread::sleep_for(300ms);
  const std::vector<std::string> runs = handoff::test::runs_of(log_of(t.raw, "late:3"));
  ASSERT_EQ(runs.size(), 1U) << "the cancelled message ran";
  EXPECT_EQ(runs[0].substr(runs[0].find(' ')), " 0 1");
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", keep)) << "moved and run";
}

TEST(RedisActor, delayed_messages_due_together_over_many_keys_all_run_once_in_posting_order_and_none_early) {
  // More than one sweep moves per pending set: the sweeper goes again at once.
  recorded t;
  constexpr int keys = 40;
  constexpr int count = 2500;
  const std::string tag = due_tag(500ms);  // before every post: none may run before it
  for (int i = 0; i < count; ++i) {
    t.actors.post_after("many:" + std::to_string(i % keys), tag + " " + std::to_string(i), 500ms);
  }
  const auto all_ran = [&] {
    std::size_t n = 0;
    for (int k = 0; k < keys; ++k) n += log_of(t.raw, "many:" + std::to_string(k)).size();
    return n == count;
  };
  ASSERT_TRUE(eventually(all_ran, 30s));
  std::map<std::string, long long> seen;
  for (int k = 0; k < keys; ++k) {
    const std::vector<std::string> log = log_of(t.raw, "many:" + std::to_string(k));
    EXPECT_EQ(handoff::test::check_log(log, &seen), "");
    EXPECT_EQ(early_runs(log), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message;
}

TEST(RedisActor, a_delayed_message_moved_by_a_process_without_its_handler_runs_where_the_handler_is) {
  redis_server server;
  hr::actor_system mover(at(server.port()), quick());  // sweeps, handles "other:" only
  mover.on("other:", [](hr::delivery&) { ADD_FAILURE() << "wrong family"; });
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;  // sweeps only when told to
  hr::actor_system worker(at(server.port()), a);
  std::atomic<int> runs{0};
  std::atomic<std::uint32_t> attempt{0};
  worker.on("job:", [&](hr::delivery& d) {
    attempt = d.attempt();
    ++runs;
  });
  mover.post_after("job:1", "later", 20ms);
  ASSERT_TRUE(eventually([&] { return worker.pending("job:1") == 1; })) << "the mover's sweep moved it";
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(runs.load(), 0) << "run by a process without its handler";
  EXPECT_EQ(worker.sweep(), 1U);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(attempt.load(), 1U);
  EXPECT_EQ(worker.pending("job:1"), 0U);
}

TEST(RedisActor, a_delayed_message_taken_by_a_sweep_sees_the_committed_state_and_runs_once_as_a_first_delivery) {
  for (const bool pooled : {false, true}) {
    SCOPED_TRACE(pooled ? "with an executor (the sweep owns the actor, the executor peeks)"
                        : "without (the sweep's reply delivers the message)");
    redis_server server;
    handoff::thread_pool pool(1);
    hr::actor_options a = quick();
    a.remember_handled = true;
    if (pooled) a.executor = pool;
    hr::actor_system actors(at(server.port()), a);
    std::mutex mu;
    std::vector<std::string> seen;  // "<body> <attempt> <last handled id> <state>"
    actors.on("c:", [&](hr::delivery& d) {
      const std::lock_guard<std::mutex> lock(mu);
      seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " +
                     std::string(d.last_handled_id()) + " " + std::string(d.state()));
      d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
    });
    const std::string first = actors.post("c:1", "now");
    ASSERT_TRUE(eventually([&] { return actors.pending("c:1") == 0; }));
    actors.post_after("c:1", "later", 30ms);
    ASSERT_TRUE(eventually([&] {
      const std::lock_guard<std::mutex> lock(mu);
      return seen.size() == 2;
    }));
    ASSERT_TRUE(eventually([&] { return actors.pending("c:1") == 0; }));
    const std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen[1], "later 1 " + first + " 1");
  }
}

TEST(RedisActor, sweeps_on_two_threads_of_one_process_at_once_each_drain_what_they_took_over) {
  // The sweeper thread and a caller of sweep() take actors over at the same moments, each
  // draining its own in rounds on its own thread.
  hr::actor_options a = quick();
  a.sweep_interval = 1ms;
  recorded t({}, a);
  constexpr int count = 400;  // one per key, due over 400 ms
  for (int i = 0; i < count; ++i) {
    const auto delay = std::chrono::milliseconds(50 + i);
    t.actors.post_after("both:" + std::to_string(i), due_tag(delay) + " 0", delay);
  }
  std::atomic<bool> done{false};
  std::size_t by_caller = 0;
  std::thread caller([&] {
    while (!done) by_caller += t.actors.sweep();
  });
  const auto all_ran = [&] { return t.raw.string({"GET", "t:runs"}) == std::to_string(count); };
  const bool ran = eventually(all_ran, 20s);
  done = true;
  caller.join();
  ASSERT_TRUE(ran) << t.raw.string({"GET", "t:runs"}) << " of " << count;
  EXPECT_GT(by_caller, 0U) << "the caller's sweeps took nothing: the test did not race";
  for (int i = 0; i < count; ++i) {
    const std::vector<std::string> log = log_of(t.raw, "both:" + std::to_string(i));
    ASSERT_EQ(log.size(), 1U) << i;
    EXPECT_EQ(early_runs(log), "");
  }
}

TEST(RedisActor, a_due_delayed_message_whose_mailbox_is_full_stays_delayed_and_moves_once_there_is_room) {
  redis_server server;
  raw_redis raw(server.port());
  hr::actor_options a = quick();
  a.capacity = 1;
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  const int port = server.port();
  actors.on("q:", [&gate, port](hr::delivery& d) {
    if (d.body() == "m 0") gate.wait();
    handoff::test::record_run(port, d);
  });
  std::thread owner([&] { actors.post("q:1", "m 0"); });  // holds the mailbox's one place
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  const std::string id = actors.post_after("q:1", "d 1", 20ms);
  std::this_thread::sleep_for(200ms);  // due, and swept several times meanwhile
  EXPECT_EQ(actors.pending("q:1"), 1U) << "moved past the mailbox's capacity";
  EXPECT_EQ(raw.integer({"ZCARD", "handoff:actors:delayed"}), 1) << "dropped instead of kept for a later sweep";
  gate.open();
  owner.join();
  ASSERT_TRUE(eventually([&] { return log_of(raw, "q:1").size() == 2; }, 10s));
  EXPECT_EQ(handoff::test::runs_of(log_of(raw, "q:1")), (std::vector<std::string>{"m 0 1", "d 1 1"}));
  EXPECT_FALSE(actors.cancel_delayed("q:1", id));
}

TEST(RedisActor, delayed_posts_survive_the_kill_of_every_process_and_a_server_restart_with_persistence) {
  redis_server server({"--appendonly", "yes", "--appendfsync", "always"});
  const int port = server.port();
  constexpr int count = 200;
  // A sender without handlers (it never sweeps) posts them due 1.5 s later, and is killed.
  const auto sender = helper({std::to_string(port), "300", "delay", std::to_string(count), "1500", "late:a", "late:b"});
  {
    raw_redis raw(port);
    ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:accepted:delay"}) == count; }, 10s));
  }
  sender->kill();
  server.restart();  // SIGKILL, then the same port and directory: the append-only file is read back
  // A process started after the crash runs every one, once, none early.
  hr::actor_system actors(at(port), quick());
  actors.on("", [port](hr::delivery& d) { handoff::test::record_run(port, d); });
  raw_redis raw(port);
  ASSERT_TRUE(eventually([&] { return log_of(raw, "late:a").size() + log_of(raw, "late:b").size() == count; }, 20s));
  std::map<std::string, long long> seen;
  for (const char* key : {"late:a", "late:b"}) {
    EXPECT_EQ(handoff::test::check_log(log_of(raw, key), &seen), "");
    EXPECT_EQ(early_runs(log_of(raw, key)), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message;
}

TEST(RedisActor, a_full_mailbox_refuses_posts_and_post_for_waits_only_until_its_timeout) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 3;
  hr::actor_system actors(at(server.port()), a);
  busy_owner owner(actors);
  actors.post("q:1", "m1");
  actors.post("q:1", "m2");
  EXPECT_FALSE(actors.try_post("q:1", "m3").has_value());
  // The in-process actors' error, and not a Redis failure.
  EXPECT_THROW(actors.post("q:1", "m3"), handoff::mailbox_full);
  try {
    actors.post("q:1", "m3");
  } catch (const hr::error&) {
    ADD_FAILURE() << "a full mailbox reported as a Redis failure";
  } catch (const handoff::mailbox_full&) {  // NOLINT(bugprone-empty-catch): expected
  }
  const auto t0 = steady::now();
  EXPECT_THROW(actors.post_for("q:1", "m3", 100ms), handoff::mailbox_full);
  EXPECT_GE(since(t0), 100ms);
  EXPECT_EQ(actors.pending("q:1"), 3U);
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    owner.release();
  });
  EXPECT_NO_THROW(actors.post_for("q:1", "m3", 10s));
  later.join();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

TEST(RedisActor, capacity_0_means_an_unbounded_mailbox) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 0;
  hr::actor_system actors(at(server.port()), a);
  busy_owner owner(actors);
  for (int i = 1; i < 20; ++i) EXPECT_TRUE(actors.try_post("q:1", "m" + std::to_string(i)).has_value()) << i;
  EXPECT_EQ(actors.pending("q:1"), 20U);
  owner.release();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

TEST(RedisActor, max_messages_and_max_time_0_mean_no_budget_so_the_owner_drains_the_whole_backlog) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.max_messages = 0;
  a.max_time = 0ns;
  a.sweep_interval = 0ms;  // a budget would announce the actor for a sweeper
  hr::actor_system actors(at(server.port()), a);
  std::thread::id owner;
  const auto threads = backlog_run(actors, {&actors}, owner);
  ASSERT_EQ(threads.size(), 10U);
  for (std::size_t i = 0; i < threads.size(); ++i) EXPECT_EQ(threads[i], owner) << "message " << i;

  hr::actor_options negative = quick();
  negative.max_time = -1ns;
  EXPECT_THROW(hr::actor_system(at(server.port()), negative), std::invalid_argument);
}

TEST(RedisActor, an_ownership_lease_too_long_for_the_clock_is_sent_as_the_longest_lease) {
  redis_server server;
  hr::actor_options a = quick();
  a.lease = handoff::lease{std::chrono::nanoseconds::max()};
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  actors.on("q:", [&](hr::delivery&) { gate.wait(); });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  raw_redis raw(server.port());
  // 2^42 ms, about 139 years, as the keyed mutex's longest lease.
  constexpr long long longest = 1LL << 42;
  EXPECT_TRUE(eventually([&] { return raw.integer({"PTTL", "handoff:{q:1}:actor:owner"}) > longest - 60'000; }));
  EXPECT_LE(raw.integer({"PTTL", "handoff:{q:1}:actor:owner"}), longest);
  gate.open();
  owner.join();
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, a_body_over_the_size_limit_is_refused_before_anything_is_sent) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_message_bytes = 16;
  hr::actor_system actors(at(server.port()), a);
  actors.on("", [](hr::delivery&) {});
  EXPECT_THROW(actors.post("k", std::string(17, 'x')), std::invalid_argument);
  EXPECT_NO_THROW(actors.post("k", std::string(16, 'x')));
  raw_redis raw(server.port());
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1) << "only the prefix's format marker";
}

TEST(RedisActor, keys_and_bodies_of_any_bytes_reach_their_own_actor_intact) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  std::vector<std::string> got;
  actors.on("", [&](hr::delivery& d) { got.push_back(std::string(d.key()) + "=" + std::string(d.body())); });
  const std::vector<std::string> keys = {"a{b}", std::string("a\0b", 3), "a\x01(b", "", "room 7\n*", "{}"};
  std::vector<std::string> want;
  for (const std::string& k : keys) {
    const std::string body = std::string("x \0 y", 5) + k;
    actors.post(k, body);
    want.push_back(k + "=" + body);
  }
  EXPECT_EQ(got, want);
}

TEST(RedisActor, every_client_refuses_a_prefix_that_holds_data_of_another_format) {
  redis_server server;
  raw_redis raw(server.port());
  const auto refused = [&](const char* who, auto make) {
    try {
      make();
      ADD_FAILURE() << who << " started beside another format";
    } catch (const hr::error& e) {
      EXPECT_NE(std::string(e.what()).find("format"), std::string::npos) << who << ": " << e.what();
    }
  };
  const auto each_client_refuses = [&] {
    refused("actor_system", [&] { hr::actor_system(at(server.port()), quick()); });
    refused("keyed_mutex", [&] { hr::keyed_mutex(at(server.port())); });
    refused("fenced_store", [&] { hr::fenced_store(at(server.port())); });
    refused("versioned_store", [&] { hr::versioned_store(at(server.port())); });
  };
  hr::options other = at(server.port());
  other.prefix = "other:";
  { hr::actor_system actors(other, quick()); }
  EXPECT_EQ(raw.string({"GET", "other:format"}), "3") << "the first client marks its prefix";
  (void)raw.command({"SET", "handoff:format", "2"});  // the version before's data (a `count` key per actor)
  each_client_refuses();
  (void)raw.command({"SET", "handoff:format", "4"});  // a newer version's data
  each_client_refuses();
  (void)raw.command({"DEL", "handoff:format"});
  // No marker, but actors with messages: data of a build from before the marker.
  (void)raw.command({"ZADD", "handoff:actors:pending", "0", "room:1"});
  each_client_refuses();
  EXPECT_EQ(raw.string({"GET", "handoff:format"}), "") << "a refusing client writes nothing";
  { hr::actor_system actors(other, quick()); }  // another prefix is not affected
}

TEST(RedisActor, a_stopped_server_gives_an_error_within_the_command_timeout_not_a_hang) {
  redis_server server;
  hr::options o = at(server.port());
  o.command_timeout = 200ms;
  o.connect_timeout = 200ms;
  hr::actor_system actors(o, quick());
  actors.on("", [](hr::delivery&) {});
  actors.post("k", "warm");  // a pooled connection exists
  ::kill(server.pid(), SIGSTOP);
  const auto t0 = steady::now();
  EXPECT_THROW(actors.post("k", "stalled"), hr::error);
  EXPECT_LT(since(t0), 1000ms);
  ::kill(server.pid(), SIGCONT);
  server.kill();
  const auto t1 = steady::now();
  EXPECT_THROW(actors.post("k", "dead"), hr::error);
  EXPECT_LT(since(t1), 1000ms);
}

TEST(RedisActor, unfinished_messages_survive_a_server_restart_with_persistence_and_an_owner_crash) {
  hr::actor_options a = quick();
  a.on_error = [](std::string_view, std::exception_ptr) {};  // the restart breaks connections
  recorded t({"--appendonly", "yes", "--appendfsync", "always"}, a);
  const int port = t.port;
  hr::actor_system& actors = t.actors;
  const auto owner = helper({std::to_string(port), "300", "hang", "room:r"});
  ASSERT_TRUE(eventually([&] { return t.raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  for (int i = 0; i < 3; ++i) actors.post("room:r", "t " + std::to_string(i));
  owner->kill();
  t.server.restart();  // SIGKILL, then the same port and directory: the append-only file is read back
  raw_redis raw(port);
  ASSERT_TRUE(eventually([&] { return actors.pending("room:r") == 0 && !log_of(raw, "room:r").empty(); }, 20s));
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:r"), &seen), "");
  for (const char* m : {"hang 0", "t 0", "t 1", "t 2"}) EXPECT_GE(seen[m], 1) << m << " lost";
}

}  // namespace
