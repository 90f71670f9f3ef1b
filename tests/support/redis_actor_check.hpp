// What every handler of the handoff::redis actor tests records, in the test process and in
// redis_actor_helper alike, on plain hiredis (independent of the library):
//   t:log:<key>      RPUSH "<body> <attempt> <start ns> <end ns>" when a handler run ends
//                    (steady_clock: one clock for every process on the machine); a run
//                    whose process was killed leaves nothing
// Messages posted by a sender are "<tag> <sequence>"; check_log() checks a key's log.
#pragma once

#include <hiredis/hiredis.h>

#include <handoff/redis/actor_system.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace handoff::test {

// One command on this thread's connection to 127.0.0.1:port (opened on first use).
inline long long actor_check_command(int port, const std::vector<std::string>& args) {
  struct ctx_free {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  thread_local std::unique_ptr<redisContext, ctx_free> ctx;
  thread_local int ctx_port = 0;
  if (ctx == nullptr || ctx->err != 0 || ctx_port != port) {
    ctx.reset(redisConnect("127.0.0.1", port));
    ctx_port = port;
    if (ctx == nullptr || ctx->err != 0) throw std::runtime_error("actor check: cannot connect");
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r =
      static_cast<redisReply*>(redisCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) throw std::runtime_error("actor check: I/O error");
  const long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  freeReplyObject(r);
  return v;
}

inline long long monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Records one handler run (see the overview).
inline void record_run(int port, const handoff::redis::delivery& d) {
  const long long start = monotonic_ns();
  actor_check_command(port, {"INCR", "t:runs"});  // a round trip inside the handler
  const long long end = monotonic_ns();
  actor_check_command(port, {"RPUSH", "t:log:" + std::string(d.key()),
                             std::string(d.body()) + " " + std::to_string(d.attempt()) + " " + std::to_string(start) +
                                 " " + std::to_string(end)});
}

// A state written by counting handlers: "" is 0.
inline long long count_of(std::string_view state) { return state.empty() ? 0 : std::stoll(std::string(state)); }

// "<tag> <sequence> <attempt>" of each entry of a log.
inline std::vector<std::string> runs_of(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const std::string& entry : log) {
    std::istringstream in(entry);
    std::string tag, seq, attempt;
    in >> tag >> seq >> attempt;
    out.push_back(tag + " " + seq + " " + attempt);
  }
  return out;
}

// Checks one key's log: no two runs overlapped in time (each started after the one logged
// before it ended, on the machine's monotonic clock, which all processes share); per
// sender tag, sequence numbers go back only to re-run a message that ran before (an owner
// that died mid-batch had not dequeued it), and then with attempt > 1; a number seen again
// is flagged so too. Returns "" if fine, else what is wrong. `seen` counts the runs of
// every "<tag> <sequence>".
inline std::string check_log(const std::vector<std::string>& log, std::map<std::string, long long>* seen) {
  std::map<std::string, long long> last;  // tag -> last sequence
  std::map<std::string, long long> ran;   // "<tag> <sequence>" -> runs in this log
  long long previous_end = 0;
  for (const std::string& entry : log) {
    std::istringstream in(entry);
    std::string tag;
    long long seq = 0;
    long long attempt = 0;
    long long start = 0;
    long long end = 0;
    if (!(in >> tag >> seq >> attempt >> start >> end)) return "malformed entry: " + entry;
    if (start < previous_end) return "two handlers overlapped: " + entry + " started before the previous one ended";
    previous_end = end;
    const std::string message = tag + " " + std::to_string(seq);
    if (seen != nullptr) ++(*seen)[message];
    const bool rerun = ran[message]++ > 0;
    if (rerun && attempt < 2) return "re-run of " + message + " not flagged";
    const auto it = last.find(tag);
    if (it != last.end() && seq < it->second && !rerun) {
      return "order broken for " + tag + ": " + std::to_string(seq) + " after " + std::to_string(it->second);
    }
    last[tag] = seq;
  }
  return "";
}

}  // namespace handoff::test
