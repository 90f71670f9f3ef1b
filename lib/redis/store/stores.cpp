// handoff::redis::fenced_store and versioned_store: one command or script per call on a
// pooled connection (fenced_store.hpp, versioned_store.hpp; scripts in scripts.hpp).
#include <charconv>
#include <stdexcept>
#include <string>
#include <utility>

#include "../common/connection.hpp"
#include "../common/names.hpp"
#include "../common/router.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/redis/fenced_store.hpp"
#include "handoff/redis/versioned_store.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

// What both stores share: the options, the servers (one, or a cluster's primaries) and the
// scripts.
struct store_core {
  store_core(options opts, std::string_view what) : o(validated(std::move(opts))), servers(o) {
    check_server(servers, o, what);
    servers.each_primary([&](connection& c) {
      c.load(fenced_write);
      c.load(compare_and_set);
    });
  }

  // The Redis name of `key`'s record of `kind` (names.hpp).
  [[nodiscard]] std::string name(std::string_view key, std::string_view kind) const {
    return key_name(o.prefix, key, kind, servers.clustered());
  }

  const options o;
  router servers;  // after o, which it refers to
  // Loaded once by the constructor, then only read.
  script fenced_write{scripts::fenced_write, {}};
  script compare_and_set{scripts::compare_and_set, {}};
};

namespace {

std::string describe(std::string_view op, std::string_view key) {
  std::string s(op);
  s += ' ';
  s += handoff::detail::key_excerpt(key);
  return s;
}

// A bulk string of a reply, or "" for nil.
std::string_view bulk_or_nil(const redisReply& r, std::string_view what) {
  if (r.type == REDIS_REPLY_NIL) return {};
  if (r.type != REDIS_REPLY_STRING) unexpected(what);
  return text(r);
}

// A stored token or version: decimal digits, or nil for 0.
std::uint64_t number(const redisReply& r, std::string_view what) {
  const std::string_view s = bulk_or_nil(r, what);
  if (s.empty()) return 0;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    throw error("handoff::redis: " + std::string(what) + ": the record holds no number but " +
                handoff::detail::key_excerpt(s));
  }
  return v;
}

// HMGET name field value: the record's number and value.
std::pair<std::uint64_t, std::string> read_record(store_core& core, const std::string& name, const char* field,
                                                  std::string_view what) {
  const reply r = core.servers.command(name, {"HMGET", name, field, "value"}, what);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) unexpected(what);
  const std::uint64_t n = number(*r->element[0], what);
  return {n, std::string(bulk_or_nil(*r->element[1], what))};
}

}  // namespace
}  // namespace handoff::redis::detail

namespace handoff::redis {

// ---- fenced_store ----

fenced_store::fenced_store(options o)
    : core_(std::make_unique<detail::store_core>(
          std::move(o), "a fenced record could be evicted and forget its token, letting a stale write in")) {}
fenced_store::~fenced_store() = default;

bool fenced_store::write(std::string_view key, std::string_view value, std::uint64_t token) {
  if (token == 0) throw std::invalid_argument("handoff::redis::fenced_store::write: token 0 (an empty guard's)");
  const std::string what = detail::describe("fenced write of", key);
  const std::string record = core_->name(key, "fenced");
  const std::string fence = core_->name(key, "fence");
  const std::string t = std::to_string(token);
  const detail::reply r = core_->servers.eval(core_->fenced_write, {record, fence}, {t, value}, what);
  if (r->type != REDIS_REPLY_INTEGER) detail::unexpected(what);
  return r->integer == 1;
}

fenced_value fenced_store::read(std::string_view key) {
  const std::string what = detail::describe("fenced read of", key);
  auto [token, value] = detail::read_record(*core_, core_->name(key, "fenced"), "token", what);
  return {std::move(value), token};
}

const options& fenced_store::config() const noexcept { return core_->o; }

// ---- versioned_store ----

versioned_store::versioned_store(options o)
    : core_(std::make_unique<detail::store_core>(
          std::move(o), "a versioned record could be evicted and its version reused, letting a stale write in")) {}
versioned_store::~versioned_store() = default;

versioned_value versioned_store::read(std::string_view key) {
  const std::string what = detail::describe("versioned read of", key);
  auto [version, value] = detail::read_record(*core_, core_->name(key, "versioned"), "version", what);
  return {std::move(value), version};
}

bool versioned_store::compare_and_set(std::string_view key, std::uint64_t version, std::string_view value) {
  versioned_value current{{}, version};
  return try_set(key, std::string(value), current);
}

bool versioned_store::try_set(std::string_view key, std::string value, versioned_value& current) {
  const std::string what = detail::describe("compare_and_set of", key);
  const std::string record = core_->name(key, "versioned");
  const std::string expected = std::to_string(current.version);
  const detail::reply r = core_->servers.eval(core_->compare_and_set, {record}, {expected, value}, what);
  // {1, new version} or {0, current version, current value}.
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer < 0) {
    detail::unexpected(what);
  }
  const bool won = r->element[0]->integer == 1;
  if (!won && r->elements != 3) detail::unexpected(what);
  current.version = static_cast<std::uint64_t>(r->element[1]->integer);
  current.value = won ? std::move(value) : std::string(detail::bulk_or_nil(*r->element[2], what));
  return won;
}

const options& versioned_store::config() const noexcept { return core_->o; }

}  // namespace handoff::redis
