// The lock's commands: the scripts sent and their replies parsed (see commands.hpp).
#include "commands.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <tuple>

#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

namespace {
// BLPOP's timeout: seconds with decimals (0 would mean for ever).
std::string blpop_timeout(std::int64_t ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%lld.%03lld", static_cast<long long>(ms / 1000), static_cast<long long>(ms % 1000));
  return s;
}
}  // namespace

lock_commands::lock_commands(const options& o, client_counters& counters, const lease_clock& clock)
    : o_(o), clock_(clock), router_(o, &counters), channel_prefix_(o.prefix + "notify:"),
      heartbeat_ttl_ms_(std::to_string(clock.heartbeat_ms)) {}

void lock_commands::load() {
  router_.each_primary([&](connection& c) {
    for (script* s : {&acquire_script_, &release_script_, &extend_script_, &cancel_script_}) c.load(*s);
    skip_replies_ = !router_.clustered() && c.supports_reply_skip();
  });
}

std::string lock_commands::request_id(std::int64_t lease_ns, bool blocking) {
  return id_ + ":" + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed)) + (lease_ns == 0 ? ":w" : ":") +
         std::to_string(clock_.lease_ms(lease_ns)) + ":" + heartbeat_ttl_ms_ + (blocking ? ":l" : "");
}

std::string lock_commands::channel_prefix(const key_names& n) const {
  return router_.clustered() ? channel_prefix(hash_slot(n.lock)) : channel_prefix_;
}

std::string lock_commands::channel_prefix(std::uint16_t slot) const {
  if (!router_.clustered()) return channel_prefix_;
  std::string p = channel_prefix_;
  p += '{';
  p += slot_tag(slot);
  p += '}';
  return p;
}

attempt_result lock_commands::parse_attempt(const redisReply& r, std::string_view key) {
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[0]->type != REDIS_REPLY_INTEGER ||
      r.element[1]->type != REDIS_REPLY_INTEGER || r.element[2]->type != REDIS_REPLY_INTEGER) {
    throw error("handoff::redis: lock " + handoff::detail::key_excerpt(key) +
                ": unexpected reply from the acquire script");
  }
  return {r.element[0]->integer == 1, r.element[1]->integer, r.element[2]->integer};
}

attempt_result lock_commands::attempt(lane l, const key_names& n, std::string_view id, std::int64_t lease_ms,
                                      bool queue, std::string_view key) {
  const std::string ms = std::to_string(lease_ms);
  const std::string channels = channel_prefix(n);
  const reply r = router_.eval(acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                               {id, ms, queue ? "1" : "0", heartbeat_ttl_ms_, channels, "0"},
                               "lock " + handoff::detail::key_excerpt(key), l);
  return parse_attempt(*r, key);
}

pushed_grant lock_commands::parse_grant(const redisReply& r, std::string_view what) {
  if (r.type == REDIS_REPLY_NIL) return {};
  // [list, "-"] or [list, "<fence> <heartbeat> <ms waited>"]
  if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 && r.element[1]->type == REDIS_REPLY_STRING) {
    const std::string grant(r.element[1]->str, r.element[1]->len);
    if (grant == "-") return {{}, true};
    std::uint64_t fence = 0;
    long long beat = 0;
    long long waited = 0;
    if (std::sscanf(grant.c_str(), "%" SCNu64 " %lld %lld", &fence, &beat, &waited) == 3 && fence != 0) {
      return {{fence, beat, waited}, false};
    }
  }
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply to BLPOP");
}

std::pair<attempt_result, pushed_grant> lock_commands::attempt_and_wait(const key_names& n, std::string_view id,
                                                                        std::int64_t lease_ms, const std::string& list,
                                                                        std::int64_t ms, std::string_view key,
                                                                        bool skip_reply) {
  const std::string lease = std::to_string(lease_ms);
  const std::string wait_ms = std::to_string(ms);
  const std::string channels = channel_prefix(n);
  const std::string what = "lock " + handoff::detail::key_excerpt(key);
  // The replies may take the whole wait: the socket waits that long plus one command_timeout.
  const auto timeout = std::chrono::milliseconds(ms) + o_.command_timeout;
  if (skip_reply) {
    const reply r = router_.run(n.lock, what, false, lane::waits, [&](connection& c, bool) {
      return c.eval_skipped_then(acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                                 {id, lease, "1", heartbeat_ttl_ms_, channels, wait_ms, "1"},
                                 {"BLPOP", list, blpop_timeout(ms)}, what, timeout);
    });
    return parse_listed(*r, what);
  }
  auto [a, blpop] = router_.eval_then(lane::waits, acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                                      {id, lease, "1", heartbeat_ttl_ms_, channels, wait_ms},
                                      {"BLPOP", list, blpop_timeout(ms)}, what, timeout);
  // A BLPOP sent after an ASKING script is redirected in turn (its list's slot is
  // migrating): the attempt stands; wait again with a BLPOP of its own, routed.
  if (blpop->type == REDIS_REPLY_ERROR && router_.clustered()) return {parse_attempt(*a, key), {{}, true}};
  return {parse_attempt(*a, key), parse_grant(*checked(std::move(blpop), what), what)};
}

std::pair<attempt_result, pushed_grant> lock_commands::parse_listed(const redisReply& r, std::string_view what) {
  if (r.type == REDIS_REPLY_NIL) return {{false, -1, -1}, {}};  // nothing in time, or the script failed
  if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 && r.element[1]->type == REDIS_REPLY_STRING) {
    const std::string got(r.element[1]->str, r.element[1]->len);
    long long a = 0;
    long long b = 0;
    // "g <fence> <lease ms left>": the attempt got the key, as {1, fence, left} would say.
    if (std::sscanf(got.c_str(), "g %lld %lld", &a, &b) == 2 && a > 0) return {{true, a, b}, {}};
    // "- <pttl>": look again when the holder's lease ends, as {0, pttl, ...} and '-' would say.
    if (std::sscanf(got.c_str(), "- %lld", &a) == 1) return {{false, a, -1}, {{}, true}};
    // A release's grant. The attempt emptied the list before the BLPOP behind it ran, so
    // the grant answers this attempt: its heartbeat is the one the attempt recorded.
    const pushed_grant g = parse_grant(r, what);
    if (g.grant.fence != 0) return {{false, -1, g.grant.beat}, g};
  }
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply to BLPOP");
}

pushed_grant lock_commands::await_grant(const std::string& list, std::int64_t ms, std::string_view key) {
  const std::string what = "wait for " + handoff::detail::key_excerpt(key);
  const std::string seconds = blpop_timeout(ms);
  const std::vector<std::string_view> blpop{"BLPOP", list, seconds};
  const auto timeout = std::chrono::milliseconds(ms) + o_.command_timeout;
  reply r = router_.run(list, what, false, lane::waits,
                        [&](connection& c, bool asking) { return c.call(blpop, what, asking, timeout); });
  return parse_grant(*checked(std::move(r), what), what);
}

void lock_commands::cancel(lane l, const key_names& n, std::string_view id, std::string_view key) noexcept {
  try {
    router_.eval(cancel_script_, {n.lock, n.queue, n.waiters, n.fence}, {id, channel_prefix(n)},
                 "cancel wait for " + handoff::detail::key_excerpt(key), l);
  } catch (...) {  // NOLINT(bugprone-empty-catch): documented; the heartbeat or lease ends it
  }
}

void lock_commands::release(const hold& h) {
  router_.eval(release_script_, {h.names.lock, h.names.queue, h.names.waiters, h.names.fence},
               {h.value, channel_prefix(h.names)}, "unlock " + handoff::detail::key_excerpt(h.key));
}

bool lock_commands::renew(lane l, hold& h, std::int64_t lease_ns, std::string_view doing) {
  const std::string lease_ms = std::to_string(clock_.lease_ms(lease_ns));
  const std::string replicas = std::to_string(o_.min_replicas);
  const std::string wait_ms = std::to_string(o_.command_timeout.count());
  const std::string what = std::string(doing) + " " + handoff::detail::key_excerpt(h.key);
  const std::int64_t sent = handoff::detail::now_ns();
  reply acks;  // WAIT's, with min_replicas
  reply r;
  if (o_.min_replicas == 0) {
    r = router_.eval(extend_script_, {h.names.lock}, {h.value, lease_ms}, what, l);
  } else {
    std::tie(r, acks) = router_.eval_then(l, extend_script_, {h.names.lock}, {h.value, lease_ms},
                                          {"WAIT", replicas, wait_ms}, what, 2 * o_.command_timeout);
  }
  const renewal got = renewal_of(sent, *r);
  if (got.renewed && acks != nullptr && (acks->type != REDIS_REPLY_INTEGER || acks->integer < o_.min_replicas)) {
    throw error("handoff::redis: " + what + ": renewed, but " +
                (acks->type == REDIS_REPLY_INTEGER ? std::to_string(acks->integer) : std::string("none")) + " of the " +
                replicas + " replicas of options::min_replicas held it within command_timeout");
  }
  h.renewed(got, lease_ns);
  return got.renewed;
}

}  // namespace handoff::redis::detail
