// handoff::testing's public calls (handoff/testing.hpp): the scheduler's members, check()
// and explore(), over the engine in lib/testing/driver.hpp.
#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "driver.hpp"
#include "handoff/detail/lock_table.hpp"

namespace handoff::testing {

using impl = scheduler::impl;

std::string describe_exception(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "(not a std::exception)";
  }
}

// --- the run's outcome (the engine's members that record and report a failure) ---

void impl::finish() {
  settle();
  if (!failed_ && std::any_of(contexts_.begin(), contexts_.end(), [](auto& c) { return c->parked; })) {
    fail("deadlock: still waiting when the test ended: " + parked_list());
  }
  abort_parked();
  settle();
}

void impl::fail(std::string_view why) noexcept { fail_with(why, std::make_exception_ptr(deadlock(std::string(why)))); }

void impl::fail_with(std::string_view why, std::exception_ptr e) noexcept {
  if (failed_) return;
  try {
    trace_ += "failed: ";
    trace_ += why;
    trace_ += '\n';
  } catch (...) {  // out of memory: the trace is short of its last line
  }
  failed_ = true;
  failure_ = std::move(e);
}

void impl::unhandled(const std::exception_ptr& e, const char* source) noexcept {
  if (failed_) return;  // a consequence of the failure (a call giving up)
  try {
    fail_with(std::string("exception thrown by ") + source + ": " + describe_exception(e), e);
  } catch (...) {
    fail_with("exception thrown by a handler", e);
  }
}

void impl::rethrow_failure() {
  thrown_ = true;
  std::rethrow_exception(failure_);
}

void impl::throw_failure_once() {
  if (!failed_ || thrown_) return;
  abort_parked();  // the calls still waiting give up before the test unwinds
  rethrow_failure();
}

void refused_waits::record(std::string why) {
  std::lock_guard lock(mutex_);
  if (!first_.empty()) return;
  first_ = std::move(why);
  any_.store(true, std::memory_order_relaxed);  // see any_
}

std::optional<std::string> refused_waits::take() {
  if (!any_.load(std::memory_order_relaxed)) return std::nullopt;  // see any_
  std::lock_guard lock(mutex_);
  any_.store(false, std::memory_order_relaxed);
  if (first_.empty()) return std::nullopt;
  return std::exchange(first_, std::string());
}

void impl::refuse_wait(std::string_view what) {
  std::ostringstream thread;
  thread << std::this_thread::get_id();
  std::string why = "thread " + thread.str() + " (neither the test's nor one of the scheduler's: a thread the test " +
                    "started itself?) waits in " + std::string(what) +
                    ": only the test's thread and the scheduler's events may wait on what was made under it";
  foreign_.record(why);
  throw std::logic_error("handoff::testing: " + why);
}

void impl::take_refused_wait() {
  if (std::optional<std::string> why = foreign_.take()) {
    fail_with(*why, std::make_exception_ptr(std::logic_error("handoff::testing: " + *why)));
  }
}

std::string_view to_string(event_kind k) noexcept {
  switch (k) {
    case event_kind::actor:
      return "actor";
    case event_kind::coroutine:
      return "coroutine";
    case event_kind::grant:
      return "grant";
    case event_kind::job:
      return "job";
    case event_kind::resume:
      return "resume";
    case event_kind::time:
      return "time";
  }
  return "?";
}

std::string duration_text(std::int64_t ns) {
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + " ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + " us";
  return std::to_string(ns) + " ns";
}

void check(bool condition, std::string_view message) {
  if (condition) return;
  if (detail::tls.driver != nullptr) {
    // Only a scheduler installs a driver (detail/test_driver.hpp), and this thread runs now.
    auto* d = static_cast<scheduler::impl*>(detail::tls.driver);
    d->fail_with("check failed: " + std::string(message), std::make_exception_ptr(check_failed(std::string(message))));
  }
  throw check_failed(std::string(message));
}

scheduler::scheduler() : impl_(std::make_unique<impl>(0, 0)) {}
scheduler::scheduler(std::uint64_t seed, unsigned preemptions) : impl_(std::make_unique<impl>(seed, preemptions)) {}
scheduler::~scheduler() = default;

bool scheduler::run_one() {
  impl& m = *impl_;
  m.throw_failure_once();
  const bool ran = m.step();
  m.throw_failure_once();
  return ran;
}

std::size_t scheduler::run_all() {
  std::size_t n = 0;
  while (run_one()) ++n;
  return n;
}

std::vector<event> scheduler::pending() const {
  impl& m = *impl_;
  m.collect();
  std::vector<event> out;
  for (const impl::candidate& c : m.candidates()) out.push_back(m.describe(c));
  return out;
}

void scheduler::advance(std::chrono::nanoseconds d) {
  impl& m = *impl_;
  const std::int64_t target = detail::add_saturating(m.now_, d.count());
  for (;;) {
    const std::int64_t next = m.tables_deadline();
    if (next > target) break;
    m.pass_time_to(next);  // one deadline at a time, in order, across the tables
  }
  m.pass_time_to(target);
}

std::chrono::nanoseconds scheduler::now() const noexcept {
  return std::chrono::nanoseconds(impl_->now_ - impl_->start_);
}

std::size_t scheduler::blocked() const noexcept {
  std::size_t n = 0;
  for (const auto& c : impl_->contexts_) n += c->parked && !c->ready(c->arg) ? 1 : 0;
  return n;
}

bool scheduler::failed() const noexcept { return impl_->failed_; }
const std::string& scheduler::trace() const noexcept { return impl_->trace_; }

// Runs one exploration run (a friend of scheduler: it builds seeded ones).
struct explorer {
  static std::pair<bool, std::string> run(const std::function<void(scheduler&)>& body, std::uint64_t seed,
                                          unsigned preemptions) {
    scheduler s(seed, preemptions);
    scheduler::impl& m = *s.impl_;
    try {
      body(s);
    } catch (...) {
      if (!m.failed_) {  // else it is the failure itself, or a call giving up after it
        try {
          std::rethrow_exception(std::current_exception());
        } catch (const std::exception& e) {
          m.fail_with(std::string("exception: ") + e.what(), std::current_exception());
        } catch (...) {
          m.fail_with("exception (not a std::exception)", std::current_exception());
        }
      }
    }
    m.finish();
    return {m.failed_, m.trace_};
  }
};

namespace {

// HANDOFF_TEST_SEED's value: decimal digits, or 0x (0X) and hex digits, below 2^64; nothing
// else (no sign, no spaces, no octal). Throws std::invalid_argument naming the value.
std::uint64_t parse_seed(std::string_view text) {
  int base = 10;
  std::string_view digits = text;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  std::uint64_t seed = 0;
  const char* end = digits.data() + digits.size();
  const auto [stop, ec] = std::from_chars(digits.data(), end, seed, base);
  if (digits.empty() || ec != std::errc() || stop != end) {
    throw std::invalid_argument("handoff::testing::explore: HANDOFF_TEST_SEED=\"" + std::string(text) +
                                "\" is not a seed: a decimal number, or 0x and a hex number, below 2^64");
  }
  return seed;
}

}  // namespace

exploration explore(const std::function<void(scheduler&)>& body, const explore_options& o) {
  if (o.runs == 0 && !o.replay) {
    throw std::invalid_argument("handoff::testing::explore: explore_options::runs is 0: nothing would run");
  }
  std::uint64_t base = o.seed;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once per exploration; nothing here sets it
  if (const char* env = std::getenv("HANDOFF_TEST_SEED"); env != nullptr && *env != '\0') base = parse_seed(env);
  exploration r;
  const std::size_t runs = o.replay ? 1 : o.runs;
  for (std::size_t i = 0; i < runs; ++i) {
    // Each run's seed: the base's i-th splitmix64 step, so that neighbouring runs differ.
    std::uint64_t seed = o.replay.value_or(base + i * 0x9e3779b97f4a7c15ULL);
    if (!o.replay) seed = (seed ^ (seed >> 31)) * 0xbf58476d1ce4e5b9ULL;
    auto [failed, trace] = explorer::run(body, seed, o.preemptions);
    ++r.runs;
    r.seed = seed;
    if (failed || o.replay) {
      r.failed = failed;
      r.trace = std::move(trace);
    }
    if (failed) {
      std::fprintf(stderr,
                   "handoff::testing::explore: run %zu of %zu failed (seed 0x%016" PRIx64
                   ")\n%sreplay: handoff::testing::explore(body, {.replay = 0x%016" PRIx64 "})\n",
                   r.runs, runs, seed, r.trace.c_str(), seed);
      break;
    }
  }
  if (!r.failed && !o.replay) r.seed = 0;
  return r;
}

}  // namespace handoff::testing
