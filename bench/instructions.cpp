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
#include <handoff/keyed_mutex.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

long lock_cycled(const std::vector<std::string>& keys, long n) {
  handoff::keyed_mutex<> m;
  long held = 0;
  for (long i = 0; i < n; ++i) {
    auto g = m.lock(keys[static_cast<std::size_t>(i) & 1023]);
    held += g.owns_lock() ? 1 : 0;
  }
  return held;
}

long keyed(long n) { return lock_cycled(short_keys(), n); }
long keyed_long(long n) { return lock_cycled(long_keys(), n); }

long keyed_hot(long n) {
  handoff::keyed_mutex<> m;
  const std::string& key = short_keys()[0];
  long held = 0;
  for (long i = 0; i < n; ++i) {
    auto g = m.lock(key);
    held += g.owns_lock() ? 1 : 0;
  }
  return held;
}

long keyed_cold(long n) {
  handoff::keyed_mutex<> m;
  std::string key;
  long held = 0;
  for (long i = 0; i < n; ++i) {
    key = "k:" + std::to_string(i);  // every key new; building it is counted in every run alike
    auto g = m.lock(key);
    held += g.owns_lock() ? 1 : 0;
  }
  return held;
}

// The baseline a keyed mutex replaces: 256 cache-line-sized std::mutex, picked by hash.
long striped(long n) {
  struct alignas(64) stripe {
    std::mutex m;
  };
  auto stripes = std::make_unique<stripe[]>(256);
  const auto& keys = short_keys();
  long held = 0;
  for (long i = 0; i < n; ++i) {
    const std::size_t h = std::hash<std::string>{}(keys[static_cast<std::size_t>(i) & 1023]);
    std::lock_guard g(stripes[h % 256].m);
    ++held;
  }
  return held;
}

long mutex(long n) {
  std::mutex mu;
  long held = 0;
  for (long i = 0; i < n; ++i) {
    std::lock_guard g(mu);
    ++held;
  }
  return held;
}

// An uncontended post: the actor is idle, so the sender runs the message and releases it.
long post(long n) {
  handoff::actor<counter> a;
  for (long i = 0; i < n; ++i) a.post([](counter& c) { ++c.n; });
  return a.ask([](counter& c) { return c.n; }).get();
}

// The same with a 48-byte capture (past a small-closure buffer of 32 or 40 bytes).
long post48(long n) {
  handoff::actor<counter> a;
  const long pad[6] = {1, 2, 3, 4, 5, 6};
  for (long i = 0; i < n; ++i) a.post([pad](counter& c) { c.n += pad[0] + pad[5]; });
  return a.ask([](counter& c) { return c.n; }).get();
}

// Messages queued behind a busy owner, then run by it: each round, one message posts 1,000
// more to its own actor, which run after it. Per message.
long backlog(long n) {
  handoff::actor<counter> a;
  for (long r = 0; r < n / 1000; ++r)
    a.post([&a](counter&) {
      for (int i = 0; i < 1000; ++i) a.post([](counter& c) { ++c.n; });
    });
  return a.ask([](counter& c) { return c.n; }).get();
}

long backlog48(long n) {
  handoff::actor<counter> a;
  for (long r = 0; r < n / 1000; ++r)
    a.post([&a](counter&) {
      const long pad[6] = {1, 2, 3, 4, 5, 6};
      for (int i = 0; i < 1000; ++i) a.post([pad](counter& c) { c.n += pad[0] + pad[5]; });
    });
  return a.ask([](counter& c) { return c.n; }).get();
}

// Messages sent from a second thread while this one owns the actor, then run here.
// Callgrind runs one thread at a time: this counts instructions, not contention.
long backlog_xthread(long n) {
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
  return a.ask([](counter& c) { return c.n; }).get();
}

// A message forwarded along 1,000 actors: per hop.
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
long chain(long n) {
  auto links = std::make_unique<handoff::actor<chain_link>[]>(1000);
  for (int i = 0; i + 1 < 1000; ++i) links[i].post([next = &links[i + 1]](chain_link& s) { s.next = next; });
  for (long i = 0; i < n / 1000; ++i) links[0].post(hop{});
  return links[999].ask([](chain_link& s) { return s.n; }).get();
}

// The mutex program of the same shape: 1,000 mutexes locked in turn, per hop.
long mutex_chain(long n) {
  struct link {
    std::mutex m;
    long n = 0;
  };
  auto links = std::make_unique<link[]>(1000);
  for (long i = 0; i < n / 1000; ++i)
    for (int j = 0; j < 1000; ++j) {
      std::lock_guard g(links[j].m);
      ++links[j].n;
    }
  return links[999].n;
}

struct mode {
  const char* name;
  long (*run)(long n);
  const char* what;
};
constexpr mode modes[] = {
    {"keyed", keyed, "keyed_mutex lock/unlock, 1,024 short keys cycled"},
    {"keyed_cold", keyed_cold, "keyed_mutex lock/unlock, every key new (its string built too)"},
    {"keyed_long", keyed_long, "keyed_mutex lock/unlock, 1,024 40-byte keys cycled"},
    {"keyed_hot", keyed_hot, "keyed_mutex lock/unlock of one key"},
    {"striped", striped, "256 striped std::mutex by std::hash, the same 1,024 keys"},
    {"mutex", mutex, "std::mutex lock/unlock"},
    {"post", post, "actor post to an idle actor, runs inline"},
    {"post48", post48, "the same, 48-byte capture"},
    {"chain", chain, "a hop along a 1,000-actor forwarding chain"},
    {"mutex_chain", mutex_chain, "a hop along 1,000 mutexes locked in turn"},
    {"backlog", backlog, "a message queued behind the busy owner, then run"},
    {"backlog48", backlog48, "the same, 48-byte capture"},
    {"backlog_xthread", backlog_xthread, "the same, sent from another thread"},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--list") {
    for (const mode& m : modes) std::printf("%s\t%s\n", m.name, m.what);
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODE N | --list\n", argv[0]);
    return 2;
  }
  const long n = std::atol(argv[2]);
  for (const mode& m : modes) {
    if (std::string_view(argv[1]) == m.name) {
      std::printf("%s %ld %ld\n", m.name, n, m.run(n));
      return 0;
    }
  }
  std::fprintf(stderr, "unknown mode %s (--list shows them)\n", argv[1]);
  return 2;
}
