// A request router that serializes per key, checked.
//
// Front-end threads (one per client connection, as I/O threads would be) read requests
// and route each one to its key's handoff::actor<key_state>. Requests for one key run one
// at a time, in the order they reach the key; requests for different keys run in
// parallel. Nobody waits for a lock:
//  - a front-end thread whose request finds the key idle runs it at once (the hand-off:
//    no queueing, no thread switch) and then goes back to reading;
//  - one that finds the key busy leaves the request in the key's mailbox and moves on;
//    the thread running the key runs it next.
// The actors share one options object: the thread_pool as executor and a budget of 4
// requests per turn. A front-end thread that finds requests piling up behind the one it
// ran hands the key to the pool after 4 of them, instead of draining a hot key for as long
// as requests keep coming while its own connection waits.
//
// Order: requests that one connection sends for a key run in the order it sent them (the
// actor's per-sender FIFO), as a client expects of its own requests. Requests that
// different connections send for one key at the same time are serialized in the order
// they reach the key; no order between them exists to keep.
//
// Checks: every key ran each connection's requests in send order, never two at once;
// different keys did run in parallel; nothing was lost or run twice.
#include <handoff/actor.hpp>
#include <handoff/actor_options.hpp>
#include <handoff/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <latch>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "expect.hpp"

using example::expect;

namespace {

constexpr std::uint32_t connections = 3;
constexpr std::uint32_t keys = 8;  // key 0 is hot: 40% of every connection's requests
constexpr std::uint32_t requests_per_connection = 300;
constexpr auto request_work = std::chrono::microseconds(50);  // stands for a database call

struct request {
  std::uint32_t key;
  std::uint32_t connection;
  std::uint32_t seq;  // send order of this connection's requests for this key
};

struct key_state {
  std::vector<request> handled;  // in the order the handlers ran
};

thread_local bool on_front_end = false;

class router {
 public:
  explicit router(std::size_t workers) : pool_(workers) {
    auto options = std::make_shared<const handoff::actor_options>(
        handoff::actor_options{.executor = pool_, .max_messages = 4, .max_time = {}, .on_error = {}});
    for (std::uint32_t k = 0; k < keys; ++k) actors_.push_back(std::make_unique<handoff::actor<key_state>>(options));
  }

  // Any thread. Never blocks; may run this request (and others of the key) on the caller.
  void route(request r, std::latch& done) {
    actors_[r.key]->post([this, r, &done](key_state& s) {
      handle(r, s);
      done.count_down();
    });
  }

  std::vector<request> handled(std::uint32_t key) {
    return actors_[key]->ask([](key_state& s) { return s.handled; }).get();
  }

  std::uint32_t overlaps_within_a_key() const { return overlaps_.load(); }
  std::uint32_t max_keys_in_parallel() const { return max_running_.load(); }
  std::uint32_t ran_on_pool() const { return on_pool_.load(); }

 private:
  void handle(request r, key_state& s) {
    slot& k = slots_[r.key];
    if (k.inside.exchange(true)) overlaps_.fetch_add(1);  // the actor promises this never happens
    const std::uint32_t now = running_.fetch_add(1) + 1;
    for (std::uint32_t m = max_running_.load(); now > m && !max_running_.compare_exchange_weak(m, now);) {
    }
    if (!on_front_end) on_pool_.fetch_add(1);

    std::this_thread::sleep_for(request_work);
    s.handled.push_back(r);  // the key's state: touched by one handler at a time

    running_.fetch_sub(1);
    k.inside.store(false);
  }

  struct alignas(64) slot {
    std::atomic<bool> inside{false};
  };

  handoff::thread_pool pool_;  // first: it must outlive the actors that use it
  std::vector<std::unique_ptr<handoff::actor<key_state>>> actors_;
  slot slots_[keys];
  std::atomic<std::uint32_t> overlaps_{0}, running_{0}, max_running_{0}, on_pool_{0};
};

}  // namespace

int main() {
  router r(4);

  // Each connection's request stream, over every key, key 0 hot.
  std::vector<std::vector<request>> streams(connections);
  std::vector<std::vector<std::uint32_t>> sent(keys, std::vector<std::uint32_t>(connections, 0));
  std::mt19937 rng(7);
  for (std::uint32_t c = 0; c < connections; ++c) {
    for (std::uint32_t i = 0; i < requests_per_connection; ++i) {
      const std::uint32_t key = rng() % 10 < 4 ? 0 : 1 + rng() % (keys - 1);
      streams[c].push_back({key, c, sent[key][c]++});
    }
  }

  std::latch done(connections * requests_per_connection);
  std::latch start(connections);  // the connections' traffic starts together
  std::vector<std::thread> front_ends;
  for (std::uint32_t c = 0; c < connections; ++c) {
    front_ends.emplace_back([&, c] {
      on_front_end = true;
      start.arrive_and_wait();
      for (const request& q : streams[c]) r.route(q, done);
    });
  }
  for (auto& t : front_ends) t.join();
  done.wait();

  for (std::uint32_t k = 0; k < keys; ++k) {
    std::vector<std::uint32_t> next(connections, 0);  // per connection: the seq expected next
    for (const request& q : r.handled(k)) {
      expect(q.key == k, "a request ran on its own key");
      expect(q.seq == next[q.connection]++, "a connection's requests for a key ran in send order");
    }
    expect(next == sent[k], "every request of the key ran exactly once");
  }
  expect(r.overlaps_within_a_key() == 0, "no two requests of one key ever ran at the same time");
  expect(r.max_keys_in_parallel() >= 2, "requests of different keys ran in parallel");

  std::printf(
      "request_router: %u requests over %u keys, in send order per connection; "
      "up to %u keys at once; %u ran on the pool\n",
      connections * requests_per_connection, keys, r.max_keys_in_parallel(), r.ran_on_pool());
  return 0;
}
