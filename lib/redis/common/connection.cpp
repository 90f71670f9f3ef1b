#include "connection.hpp"

#include "counters.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

namespace handoff::redis::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  return {.tv_sec = static_cast<time_t>(ms.count() / 1000),
          .tv_usec = static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

// EVALSHA's arguments; nkeys (the number of keys, as text) must outlive them.
std::vector<std::string_view> evalsha(const script& s, std::string_view nkeys,
                                      std::initializer_list<std::string_view> keys,
                                      std::initializer_list<std::string_view> args) {
  std::vector<std::string_view> argv{"EVALSHA", s.sha, nkeys};
  argv.insert(argv.end(), keys);
  argv.insert(argv.end(), args);
  return argv;
}

// The reply to an EVALSHA of a script the server does not know (restarted, SCRIPT FLUSH).
bool forgot(const redisReply& r) {
  return r.type == REDIS_REPLY_ERROR && std::string_view(r.str, r.len).starts_with("NOSCRIPT");
}

std::string describe(const redisReply* r) {
  if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
    return std::string(r->str, r->len);
  }
  return "unexpected reply type " + std::to_string(r->type);
}

}  // namespace

connection::connection(const options& o, client_counters* counters)
    : timeout_(o.command_timeout), socket_timeout_(o.command_timeout), counters_(counters) {
  const timeval connect_tv = to_timeval(o.connect_timeout);
  ctx_ = o.unix_socket.empty() ? redisConnectWithTimeout(o.host.c_str(), o.port, connect_tv)
                               : redisConnectUnixWithTimeout(o.unix_socket.c_str(), connect_tv);
  const std::string where = o.unix_socket.empty() ? o.host + ":" + std::to_string(o.port) : o.unix_socket;
  if (ctx_ == nullptr) throw error("handoff::redis: connect to " + where + ": out of memory");
  if (ctx_->err != 0) {
    std::string msg = "handoff::redis: connect to " + where + ": " + ctx_->errstr;
    redisFree(std::exchange(ctx_, nullptr));
    throw error(msg);
  }
  try {
    if (redisSetTimeout(ctx_, to_timeval(o.command_timeout)) != REDIS_OK) fail("set timeout on " + where);
    if (o.unix_socket.empty()) redisEnableKeepAlive(ctx_);
    if (!o.password.empty()) {
      if (o.username.empty()) {
        command({"AUTH", o.password}, "AUTH");
      } else {
        command({"AUTH", o.username, o.password}, "AUTH");
      }
    }
    if (o.database != 0) command({"SELECT", std::to_string(o.database)}, "SELECT");
  } catch (...) {
    redisFree(std::exchange(ctx_, nullptr));
    throw;
  }
}

connection::~connection() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

bool connection::stale() const noexcept {
  if (broken()) return true;
  pollfd p{.fd = ctx_->fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 0) != 0;
}

void connection::fail(std::string_view what) const {
  std::string msg = "handoff::redis: ";
  msg += what;
  msg += ": ";
  if (ctx_ == nullptr) {
    msg += "not connected";
  } else if (ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    msg += "timed out";
  } else {
    msg += ctx_->errstr[0] != '\0' ? ctx_->errstr : "connection lost";
  }
  throw error(msg);
}

void connection::append(const std::vector<std::string_view>& args, std::string_view what) {
  if (broken()) fail(what);
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
    if (ctx_->err == 0) ctx_->err = REDIS_ERR_OTHER;  // never reuse a connection after a failure
    fail(what);
  }
}

reply connection::receive(std::string_view what) {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
    if (ctx_->err == 0) ctx_->err = REDIS_ERR_OTHER;
    fail(what);
  }
  return reply(static_cast<redisReply*>(raw));
}

reply connection::send(const std::vector<std::string_view>& args, std::string_view what,
                       std::chrono::milliseconds timeout) {
  set_timeout(timeout, what);
  append(args, what);
  flush(what);
  return receive(what);
}

void connection::flush(std::string_view what) {
  // hiredis writes with write(2), which raises SIGPIPE on a connection the server has
  // closed, and SIGPIPE's default action ends the process. Write its buffer here with
  // MSG_NOSIGNAL instead: a dropped connection is an error, never the end of the host.
  const std::size_t length = sdslen(ctx_->obuf);
  std::size_t written = 0;
  while (written < length) {
    const ssize_t n = ::send(ctx_->fd, ctx_->obuf + written, length - written, MSG_NOSIGNAL);
    if (n >= 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    const int e = errno;
    ctx_->err = REDIS_ERR_IO;
    const std::string why = std::generic_category().message(e);
    std::strncpy(ctx_->errstr, why.c_str(), sizeof ctx_->errstr - 1);
    errno = e;  // fail() tells a timeout (EAGAIN) from a lost connection
    fail(what);
  }
  // Empty the buffer as sdsclear() does (hiredis' sds.h declares it without C linkage).
  sdssetlen(ctx_->obuf, 0);
  ctx_->obuf[0] = '\0';
  if (counters_ != nullptr) counters_->round_trip();  // every round trip writes once, here
}

reply connection::command(std::initializer_list<std::string_view> args, std::string_view what) {
  return command(args, what, timeout_);
}

void connection::set_timeout(std::chrono::milliseconds t, std::string_view what) {
  if (t == socket_timeout_) return;  // a blocking waiter's connection keeps its BLPOP timeout
  if (broken()) fail(what);
  if (redisSetTimeout(ctx_, to_timeval(t)) != REDIS_OK) {
    ctx_->err = REDIS_ERR_OTHER;  // never reuse it with the wrong timeout
    fail(what);
  }
  socket_timeout_ = t;
}

reply connection::command(std::initializer_list<std::string_view> args, std::string_view what,
                          std::chrono::milliseconds timeout) {
  reply r = send(std::vector<std::string_view>(args), what, timeout);
  if (r->type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + std::string(what) + ": " + describe(r.get()));
  return r;
}

std::pair<reply, reply> connection::eval_then(const script& s, std::initializer_list<std::string_view> keys,
                                              std::initializer_list<std::string_view> args,
                                              std::initializer_list<std::string_view> then, std::string_view what,
                                              std::chrono::milliseconds timeout) {
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> eval = evalsha(s, nkeys, keys, args);
  const std::vector<std::string_view> next(then);
  const auto send_both = [&] {
    set_timeout(timeout, what);
    append(eval, what);
    append(next, what);
    flush(what);
    std::pair<reply, reply> both;
    both.first = receive(what);
    both.second = receive(what);
    return both;
  };
  std::pair<reply, reply> r = send_both();
  if (reloaded(*r.first, s, what)) r = send_both();
  for (const reply* x : {&r.first, &r.second}) {
    if ((*x)->type == REDIS_REPLY_ERROR) {
      throw error("handoff::redis: " + std::string(what) + ": " + describe(x->get()));
    }
  }
  return r;
}

reply connection::eval_skipped_then(const script& s, std::initializer_list<std::string_view> keys,
                                    std::initializer_list<std::string_view> args,
                                    std::initializer_list<std::string_view> then, std::string_view what,
                                    std::chrono::milliseconds timeout) {
  const std::string nkeys = std::to_string(keys.size());
  set_timeout(timeout, what);
  append({"CLIENT", "REPLY", "SKIP"}, what);
  append(evalsha(s, nkeys, keys, args), what);
  append(std::vector<std::string_view>(then), what);
  flush(what);
  reply r = receive(what);
  if (r->type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + std::string(what) + ": " + describe(r.get()));
  return r;
}

bool connection::supports_reply_skip() {
  constexpr std::string_view what = "CLIENT REPLY SKIP";
  set_timeout(timeout_, what);
  // Honoured, it answers nothing and the first PING's PONG is skipped: one PONG comes back.
  // Unknown, it answers an error, then both PINGs answer.
  append({"CLIENT", "REPLY", "SKIP"}, what);
  append({"PING"}, what);
  append({"PING"}, what);
  flush(what);
  if (receive(what)->type != REDIS_REPLY_ERROR) return true;
  receive(what);
  receive(what);
  return false;
}

bool connection::reloaded(const redisReply& r, const script& s, std::string_view what) {
  if (!forgot(r)) return false;
  command({"SCRIPT", "LOAD", s.source}, what);  // same source, same SHA
  return true;
}

void connection::load(script& s) {
  reply loaded = command({"SCRIPT", "LOAD", s.source}, "SCRIPT LOAD");
  s.sha = describe(loaded.get());
}

reply connection::eval(const script& s, std::initializer_list<std::string_view> keys,
                       std::initializer_list<std::string_view> args, std::string_view what) {
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> argv = evalsha(s, nkeys, keys, args);
  reply r = send(argv, what, timeout_);
  if (reloaded(*r, s, what)) r = send(argv, what, timeout_);
  if (r->type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + std::string(what) + ": " + describe(r.get()));
  return r;
}

std::vector<reply> connection::eval_each(const script& s, const std::vector<std::vector<std::string>>& calls,
                                         std::string_view what) {
  std::vector<reply> out(calls.size());
  std::vector<std::size_t> todo(calls.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::vector<std::string_view> argv;
  // The second pass resends what found the script forgotten; a script forgotten twice in a
  // row (SCRIPT FLUSH in between) comes back as its NOSCRIPT reply.
  for (int pass = 0; pass < 2 && !todo.empty(); ++pass) {
    set_timeout(timeout_, what);
    for (const std::size_t i : todo) {
      argv.assign({"EVALSHA", s.sha});
      argv.insert(argv.end(), calls[i].begin(), calls[i].end());
      append(argv, what);
    }
    flush(what);
    std::vector<std::size_t> again;
    for (const std::size_t i : todo) {
      out[i] = receive(what);
      if (forgot(*out[i])) again.push_back(i);
    }
    if (!again.empty() && pass == 0) reloaded(*out[again.front()], s, what);
    todo = std::move(again);
  }
  return out;
}

std::vector<reply> connection::read_available() {
  if (broken() || redisBufferRead(ctx_) != REDIS_OK) fail("subscriber read");
  std::vector<reply> out;
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail("subscriber read");
    if (raw == nullptr) return out;
    out.emplace_back(static_cast<redisReply*>(raw));
  }
}

pool::handle pool::take() {
  std::unique_lock lock(mu_);
  const bool got = cv_.wait_for(lock, o_.command_timeout, [&] { return !idle_.empty() || open_ < max_; });
  if (!got) {
    throw error("handoff::redis: no free connection within the command timeout (all " + std::to_string(max_) +
                " busy)");
  }
  while (!idle_.empty()) {
    std::unique_ptr<connection> c = std::move(idle_.back());
    idle_.pop_back();
    if (!c->stale()) return handle(*this, std::move(c));
    --open_;  // closed by the server while idle: replaced below
    ++lost_;
  }
  ++open_;
  idle_.reserve(open_);              // give_back must not allocate
  const bool replaces = lost_ != 0;  // a reconnect, for the statistics
  if (replaces) --lost_;
  lock.unlock();
  try {
    auto c = std::make_unique<connection>(o_, counters_);
    if (replaces && counters_ != nullptr) counters_->reconnect();
    return handle(*this, std::move(c));
  } catch (...) {
    lock.lock();
    if (replaces) ++lost_;
    --open_;
    cv_.notify_one();
    throw;
  }
}

void pool::give_back(std::unique_ptr<connection> c) noexcept {
  std::unique_ptr<connection> dropped;  // closed outside the lock
  {
    const std::lock_guard lock(mu_);
    if (c->broken()) {
      dropped = std::move(c);
      --open_;
      ++lost_;
    } else {
      idle_.push_back(std::move(c));
    }
  }
  cv_.notify_one();
}

}  // namespace handoff::redis::detail
