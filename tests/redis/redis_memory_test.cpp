// The memory of a handoff::redis::keyed_mutex client (promised: once every guard is gone,
// the memory of the per-key state is returned): the number of live heap blocks,
// counted by a replaced global operator new/delete, must not grow with the number of
// grants. A binary of its own, so that the replaced operators touch no other test.
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include "../support/redis_server.hpp"
#include "../support/test_support.hpp"

namespace {
std::atomic<long long> live_blocks{0};  // relaxed: a count read after the work settled
}  // namespace

void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  live_blocks.fetch_add(1, std::memory_order_relaxed);
  return p;
}
// GCC sees free() of a pointer that came from operator new once this is inlined: it is the
// malloc() above.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  live_blocks.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
#pragma GCC diagnostic pop

namespace {

using namespace std::chrono_literals;
using handoff::redis::keyed_mutex;

// Each of these leaves 5 or more blocks behind per grant if the client keeps something of
// a released key: 1000 grants would show thousands.
constexpr long long slack = 200;

// The growth of live blocks over 1000 cycles, once the client has returned what it will: the
// background thread forgets released holds on its next pass (it wakes at least once a
// second), so the count is polled for up to 5 s before the growth is reported.
template <class Cycle>
long long growth(keyed_mutex& m, Cycle cycle) {
  for (int i = 0; i < 100; ++i) cycle(m, i);  // warm-up: pool, buffers, vectors at size
  std::this_thread::sleep_for(1500ms);        // the warm-up's holds are forgotten
  const long long before = live_blocks.load(std::memory_order_relaxed);
  for (int i = 0; i < 1000; ++i) cycle(m, i);
  long long grown = 0;
  handoff::test::eventually(
      [&] {
        grown = live_blocks.load(std::memory_order_relaxed) - before;
        return grown < slack;
      },
      5s);
  return grown;
}

handoff::redis::options opts(const handoff::test::redis_server& s) {
  handoff::redis::options o;
  o.port = s.port();
  o.command_timeout = 5s;
  return o;
}

TEST(RedisClientMemory, LockAndUnlockReturnTheirMemory) {
  handoff::test::redis_server server;
  keyed_mutex m(opts(server));
  EXPECT_LT(growth(m, [](keyed_mutex& mx, int) { mx.lock("k").unlock(); }), slack);
}

TEST(RedisClientMemory, LeasedLocksReturnTheirMemory) {
  handoff::test::redis_server server;
  keyed_mutex m(opts(server));
  EXPECT_LT(growth(m, [](keyed_mutex& mx, int) { mx.lock("k", handoff::lease{10s}).unlock(); }), slack);
}

TEST(RedisClientMemory, GuardsDestroyedWithoutUnlockReturnTheirMemory) {
  handoff::test::redis_server server;
  keyed_mutex m(opts(server));
  EXPECT_LT(growth(m,
                   [](keyed_mutex& mx, int i) {
                     std::string key = std::to_string(i % 10);
                     key += "-a-key-with-a-longer-name";
                     auto g = mx.try_lock(key);
                     ASSERT_TRUE(g.owns_lock());
                   }),
            slack);
}

}  // namespace
