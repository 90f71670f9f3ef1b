// Instructions per operation on the single-thread paths, counted by callgrind:
// deterministic where 2-thread timings swing with the machine's load. Built and run by
// tools/instructions.sh, which runs each mode at two sizes and prints the difference per
// operation, so that start-up and tear-down cancel.
//
//   instructions MODE N      runs N operations of MODE; prints "MODE N checksum"
//   instructions --list      prints the modes, one per line: name, then what it counts
//
// Every keyed mode hashes with std::hash<std::string>, as the striped baseline does. The
// program uses only the public API, so that the same source builds against any revision.
#include <handoff/actor.hpp>
#include <handoff/actor_options.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/timer_service.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "thin_keyed.hpp"  // the thin keyed locks' prototype: this folder, not the library

namespace {

// 1,024 distinct short keys ("player:<n>", within std::string's in-place buffer).
const std::vector<std::string>& short_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (int i = 0; i < 1024; ++i) k.push_back("player:" + std::to_string(100000 + i * 977));
    return k;
  }();
  return keys;
}

// 1,024 distinct 40-byte keys (on the heap).
const std::vector<std::string>& long_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (int i = 0; i < 1024; ++i) {
      std::string s = "tenant:eu-west:room:" + std::to_string(1000000 + i * 7919);
      s.resize(40, '.');
      k.push_back(std::move(s));
    }
    return k;
  }();
  return keys;
}

struct counter {
  long n = 0;
};

// A message forwarded along 1,000 actors.
struct chain_link {
  handoff::actor<chain_link>* next = nullptr;
  long n = 0;
};
struct hop {
  void operator()(chain_link& s) const {
    ++s.n;
    if (s.next != nullptr) s.next->post(hop{});
  }
};
struct mutex_link {
  std::mutex m;
  long n = 0;
  mutex_link* next = nullptr;
};
// The baseline a keyed mutex replaces: std::mutex in cache-line-sized stripes.
struct alignas(64) stripe {
  std::mutex m;
};

struct mode {
  const char* name;
  const char* what;
};
constexpr mode modes[] = {
    {"keyed", "keyed_mutex lock/unlock, 1,024 short keys cycled"},
    {"keyed_cold", "keyed_mutex lock/unlock, every key new (400,000 distinct short keys built beforehand)"},
    {"keyed_cold_built", "keyed_mutex lock/unlock, every key new (its string built too)"},
    {"keyed_int", "keyed_mutex<std::uint64_t> lock/unlock, 1,024 integer keys cycled"},
    {"keyed_long", "keyed_mutex lock/unlock, 1,024 40-byte keys cycled"},
    {"keyed_hot", "keyed_mutex lock/unlock of one key"},
    {"striped", "256 striped std::mutex by std::hash, the same 1,024 short keys"},
    {"proto_thin", "thin keyed lock prototype (bench/thin_keyed.hpp), the same 1,024 short keys"},
    {"proto_thin_cold", "the same, every key new (its string built too)"},
    {"proto_thin_hot", "the same, one key"},
    {"mutex", "std::mutex lock/unlock"},
    {"post", "actor post to an idle actor, which runs it inline"},
    {"post48", "the same, 48-byte capture"},
    {"post_bounded", "actor post to an idle bounded actor (capacity 256), which runs it inline"},
    {"chain", "a hop along a 1,000-actor forwarding chain"},
    {"mutex_chain", "a hop along 1,000 mutexes locked in turn"},
    {"backlog", "a message queued behind the busy owner, then run"},
    {"backlog48", "the same, 48-byte capture"},
    {"backlog_xthread", "the same, sent from another thread"},
    {"timer_pair", "timer after(5s) with a 16-byte capture, then cancel; 10,000 pending"},
    {"timer_pair_at", "the same with at(now + 5s), now read once"},
    {"timer_rearm", "one timer's rearm(30s); 10,000 pending"},
    {"post_all16", "per message: actor post_all of 16 handlers to an idle actor, which runs them inline"},
    {"send_all16", "per message: basic_actor<int> send_all of 16 ints to an idle actor, which runs them inline"},
    {"backlog_all8", "per message: actor post_all batches of 8 queued behind the busy owner, then run"},
};

// 10,000 one-shots pending 1-60 s ahead, as in bench/timer_bench.cpp.
std::vector<handoff::timer> pending_timers(handoff::timer_service& timers, handoff::actor<counter>& a) {
  std::vector<handoff::timer> v;
  for (int i = 0; i < 10'000; ++i)
    v.push_back(timers.after(std::chrono::milliseconds(1000 + (i * 7919) % 59'000), a, [](counter&) {}));
  return v;
}

}  // namespace

// keyed_cold, keyed_cold_built and keyed_int: see keyed_modes.
[[gnu::noinline]] long more_keyed_modes(std::string_view m, long n) {
  long sink = 0;
  if (m == "keyed_cold") {
    // The same 400,000 keys are built at every size, so that building them cancels out.
    std::vector<std::string> cold;
    const long built = n > 400000 ? n : 400000;
    cold.reserve(static_cast<std::size_t>(built));
    for (long i = 0; i < built; ++i) cold.push_back("k:" + std::to_string(i));
    handoff::keyed_mutex<> km;
    for (long i = 0; i < n; ++i) {
      auto g = km.lock(cold[static_cast<std::size_t>(i)]);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else if (m == "keyed_cold_built") {
    handoff::keyed_mutex<> km;
    std::string key;
    for (long i = 0; i < n; ++i) {
      key = "k:" + std::to_string(i);  // every key new; building it is counted in every run alike
      auto g = km.lock(key);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else {
    handoff::keyed_mutex<std::uint64_t> km;
    for (long i = 0; i < n; ++i) {
      auto g = km.lock(static_cast<std::uint64_t>(100000 + (i & 1023) * 977));
      sink += g.owns_lock() ? 1 : 0;
    }
  }
  return sink;
}

// The batch modes' handlers count here; nothing in them is shared with the other modes
// (their own state type, no post or ask), so that adding them moved no other mode's figure.
long batch_count = 0;
struct batch_state {};
struct batch_counter {
  void operator()(int v) const { batch_count += v; }
};

// The batch modes, reached through keyed_modes() so that main stays as it was, and
// flattened: without it, their code in the unit moved GCC's inlining of the post modes in
// main at -O2 (post 35 to 45 instructions, in both trees alike). Per message, N a multiple
// of 1,000.
[[gnu::noinline, gnu::flatten]] long batch_modes(std::string_view m, long n) {
  const auto add = [](batch_state&) { ++batch_count; };
  if (m == "post_all16") {
    handoff::actor<batch_state> a;
    const std::array<decltype(add), 16> batch{};
    for (long i = 0; i < n / 16; ++i) a.post_all(batch);  // idle: runs here
    return batch_count;
  }
  if (m == "send_all16") {
    handoff::basic_actor<int, batch_counter> a;
    std::array<int, 16> batch{};
    batch.fill(1);
    for (long i = 0; i < n / 16; ++i) a.send_all(batch);
    return batch_count;
  }
  if (m == "backlog_all8") {
    // Each round, one message posts 125 batches of 8 to its own actor, which run after it.
    handoff::actor<batch_state> a;
    const std::array<decltype(add), 8> batch{};
    const auto round = [&a, &batch](batch_state&) {
      for (int i = 0; i < 125; ++i) a.post_all(batch);
    };
    const std::array<decltype(round), 1> start{round};
    for (long r = 0; r < n / 1000; ++r) a.post_all(start);
    return batch_count;
  }
  return -1;
}

// The keyed modes, in a function of their own: main is compiled as code run once, and the
// more it holds the less the compiler inlines into it; with the keyed modes in main, their
// growth moved the actor modes' figures (a change of the program, not of the actor:
// docs/notebook.md, "Thin keyed locks in the library").
[[gnu::noinline]] long keyed_modes(std::string_view m, long n) {
  const std::vector<std::string>& keys = short_keys();
  long sink = 0;
  if (m == "keyed" || m == "keyed_long") {
    const std::vector<std::string>& cycled = m == "keyed" ? keys : long_keys();
    handoff::keyed_mutex<> km;
    for (long i = 0; i < n; ++i) {
      auto g = km.lock(cycled[static_cast<std::size_t>(i) & 1023]);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else if (m == "keyed_cold" || m == "keyed_cold_built" || m == "keyed_int") {
    sink = more_keyed_modes(m, n);
  } else if (m == "keyed_hot") {
    handoff::keyed_mutex<> km;
    for (long i = 0; i < n; ++i) {
      auto g = km.lock(keys[0]);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else if (m == "striped") {
    auto stripes = std::make_unique<stripe[]>(256);
    for (long i = 0; i < n; ++i) {
      std::lock_guard g(stripes[std::hash<std::string>{}(keys[static_cast<std::size_t>(i) & 1023]) % 256].m);
      ++sink;
    }
  } else if (m == "proto_thin") {
    proto_thin::thin_lock tl;
    for (long i = 0; i < n; ++i) {
      auto g = tl.lock(keys[static_cast<std::size_t>(i) & 1023]);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else if (m == "proto_thin_cold") {
    proto_thin::thin_lock tl;
    std::string key;
    for (long i = 0; i < n; ++i) {
      key = "k:" + std::to_string(i);
      auto g = tl.lock(key);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else if (m == "proto_thin_hot") {
    proto_thin::thin_lock tl;
    for (long i = 0; i < n; ++i) {
      auto g = tl.lock(keys[0]);
      sink += g.owns_lock() ? 1 : 0;
    }
  } else {
    return batch_modes(m, n);  // -1 if not one of them either
  }
  return sink;
}

// Every mode's loop is a branch of main, not a function of its own: the compiler's
// inlining differs with the context (a post in a function of its own costs 44
// instructions at -O3, in main 75), and the project's figures have been taken in this
// shape since the first ones.
int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--list") {
    for (const mode& m : modes) std::printf("%s\t%s\n", m.name, m.what);
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODE N | --list\n", argv[0]);
    return 2;
  }
  const std::string_view m = argv[1];
  const long n = std::atol(argv[2]);
  long sink = 0;
  if (long k = keyed_modes(m, n); k >= 0) {
    sink = k;
  } else if (m == "mutex") {
    std::mutex mu;
    for (long i = 0; i < n; ++i) {
      std::lock_guard g(mu);
      ++sink;
    }
  } else if (m == "post") {
    handoff::actor<counter> a;
    for (long i = 0; i < n; ++i) a.post([](counter& c) { ++c.n; });
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "post_bounded") {
    handoff::actor_options o;
    o.capacity = 256;
    handoff::actor<counter> a{std::move(o)};
    for (long i = 0; i < n; ++i) a.post([](counter& c) { ++c.n; });
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "post48") {
    handoff::actor<counter> a;
    const long pad[6] = {1, 2, 3, 4, 5, 6};
    for (long i = 0; i < n; ++i) a.post([pad](counter& c) { c.n += pad[0] + pad[5]; });
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "backlog") {
    // Each round, one message posts 1,000 more to its own actor, which run after it.
    handoff::actor<counter> a;
    for (long r = 0; r < n / 1000; ++r)
      a.post([&a](counter&) {
        for (int i = 0; i < 1000; ++i) a.post([](counter& c) { ++c.n; });
      });
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "backlog48") {
    handoff::actor<counter> a;
    for (long r = 0; r < n / 1000; ++r)
      a.post([&a](counter&) {
        const long pad[6] = {1, 2, 3, 4, 5, 6};
        for (int i = 0; i < 1000; ++i) a.post([pad](counter& c) { c.n += pad[0] + pad[5]; });
      });
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "backlog_xthread") {
    // Sent from a second thread while this one owns the actor; callgrind runs one thread
    // at a time, so this counts instructions, not contention.
    handoff::actor<counter> a;
    for (long r = 0; r < n / 1000; ++r) {
      std::atomic<bool> go{false};
      std::atomic<bool> done{false};
      std::thread sender([&] {
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < 1000; ++i) a.post([](counter& c) { ++c.n; });
        done.store(true);
      });
      a.post([&](counter&) {  // runs here and holds the actor until the sender is done
        go.store(true);
        while (!done.load()) std::this_thread::yield();
      });
      sender.join();
    }
    sink = a.ask([](counter& c) { return c.n; }).get();
  } else if (m == "chain") {
    auto links = std::make_unique<handoff::actor<chain_link>[]>(1000);
    for (int i = 0; i + 1 < 1000; ++i) links[i].post([next = &links[i + 1]](chain_link& s) { s.next = next; });
    for (long i = 0; i < n / 1000; ++i) links[0].post(hop{});
    sink = links[999].ask([](chain_link& s) { return s.n; }).get();
  } else if (m == "mutex_chain") {
    auto links = std::make_unique<mutex_link[]>(1000);
    for (int i = 0; i + 1 < 1000; ++i) links[i].next = &links[i + 1];
    for (long i = 0; i < n / 1000; ++i)
      for (mutex_link* p = &links[0]; p != nullptr; p = p->next) {
        std::lock_guard g(p->m);
        ++p->n;
      }
    sink = links[999].n;
  } else if (m == "timer_pair" || m == "timer_pair_at") {
    handoff::timer_service timers;
    handoff::actor<counter> a;
    auto pending = pending_timers(timers, a);
    const auto at = timers.now() + std::chrono::seconds(5);
    const bool after = m == "timer_pair";  // compared once: not counted per operation
    for (long i = 0; i < n; ++i) {
      const long pad[2] = {i, 7};
      auto f = [pad](counter& c) { c.n += pad[0] + pad[1]; };
      handoff::timer t = after ? timers.after(std::chrono::seconds(5), a, f) : timers.at(at, a, f);
      sink += t.cancel() ? 1 : 0;
    }
  } else if (m == "timer_rearm") {
    handoff::timer_service timers;
    handoff::actor<counter> a;
    auto pending = pending_timers(timers, a);
    auto idle = timers.after(std::chrono::seconds(30), a, [](counter& c) { ++c.n; });
    for (long i = 0; i < n; ++i) sink += idle.rearm(std::chrono::seconds(30)) ? 1 : 0;
  } else {
    std::fprintf(stderr, "unknown mode %s (--list shows them)\n", argv[1]);
    return 2;
  }
  std::printf("%s %ld %ld\n", argv[1], n, sink);
  return 0;
}
