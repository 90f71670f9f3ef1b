#include "connection.hpp"

#include "counters.hpp"

#include <poll.h>

#include <new>
#include <string>
#include <utility>

namespace handoff::redis::detail {
namespace {

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
    : timeout_(o.command_timeout), io_timeout_(o.command_timeout) {
  const std::string where = o.unix_socket.empty() ? o.host + ":" + std::to_string(o.port) : o.unix_socket;
  const deadline by = std::chrono::steady_clock::now() + o.connect_timeout;
  try {
    stream_ = stream::open(o, by);
  } catch (const io_error& e) {
    throw error("handoff::redis: connect to " + where + ": " + e.what());
  }
  reader_.reset(redisReaderCreate());
  if (reader_ == nullptr) throw std::bad_alloc();
  greet(o, where, by);
  if (o.database != 0) command({"SELECT", std::to_string(o.database)}, "SELECT");
  counters_ = counters;  // from here: connecting is not a round trip of the caller's
}

connection::~connection() = default;

void connection::greet(const options& o, const std::string& where, deadline by) {
  std::vector<std::string_view> first{"PING"};
  if (!o.password.empty()) {
    first = o.username.empty() ? std::vector<std::string_view>{"AUTH", o.password}
                               : std::vector<std::string_view>{"AUTH", o.username, o.password};
  }
  const std::string what = "connect to " + where + ": " + std::string(first.front());
  io_timeout_ = std::chrono::ceil<std::chrono::milliseconds>(by - std::chrono::steady_clock::now());
  try {
    (void)checked(send(first, what, io_timeout_), what);
  } catch (const error& e) {
    // A server that drops the connection at its first command: over plain TCP, most often
    // a TLS port; over TLS, a server that refused the client's certificate (or its lack of
    // one) once the handshake was done, which TLS 1.3 reports only then.
    const std::string_view text = e.what();
    if (text.ends_with("connection closed by the server") || text.ends_with("reset by peer")) {
      throw error(std::string(text) + (o.tls.enabled ? " (refused the client certificate? see options::tls.cert_file)"
                                                     : " (a TLS port? see options::tls)"));
    }
    throw;
  }
  io_timeout_ = timeout_;
}

bool connection::stale() noexcept {
  if (broken_) return true;
  pollfd p{.fd = stream_->fd(), .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 0) == 0) return false;
  try {
    // Unasked bytes or a closed socket: stale. Nothing decrypted (a TLS session ticket): not.
    char buf[512];
    if (stream_->read(buf, sizeof buf, nullptr) == 0) return false;
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed read is what this reports
  }
  broken_ = true;
  return true;
}

void connection::fail(std::string_view what, std::string_view why) {
  broken_ = true;  // never reuse a connection after a failure
  std::string msg = "handoff::redis: ";
  msg += what;
  msg += ": ";
  msg += why;
  throw error(msg);
}

void connection::append(const std::vector<std::string_view>& args, std::string_view what) {
  if (broken_) fail(what, "connection lost");
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (n < 0 || cmd == nullptr) fail(what, "out of memory");
  out_.append(cmd, static_cast<std::size_t>(n));
  redisFreeCommand(cmd);
}

reply connection::parsed(std::string_view what) {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
    fail(what, std::string("protocol error: ") + reader_->errstr);
  }
  return reply(static_cast<redisReply*>(raw));
}

bool connection::fill(std::string_view what, const deadline* by) {
  char buf[16384];
  std::size_t n = 0;
  try {
    n = stream_->read(buf, sizeof buf, by);
  } catch (const io_error& e) {
    fail(what, e.what());
  }
  if (n != 0 && redisReaderFeed(reader_.get(), buf, n) != REDIS_OK) fail(what, "out of memory");
  return n != 0;
}

reply connection::receive(std::string_view what) {
  const deadline by = due();
  for (;;) {
    if (reply r = parsed(what)) return r;
    fill(what, &by);
  }
}

reply connection::send(const std::vector<std::string_view>& args, std::string_view what,
                       std::chrono::milliseconds timeout) {
  set_timeout(timeout);
  append(args, what);
  flush(what);
  return receive(what);
}

void connection::flush(std::string_view what) {
  try {
    stream_->write_all(out_, due());
  } catch (const io_error& e) {
    fail(what, e.what());
  }
  out_.clear();
  if (counters_ != nullptr) counters_->round_trip();  // every round trip writes once, here
}

reply checked(reply r, std::string_view what) {
  if (r->type == REDIS_REPLY_ERROR) throw error("handoff::redis: " + std::string(what) + ": " + describe(r.get()));
  return r;
}

reply connection::command(std::initializer_list<std::string_view> args, std::string_view what) {
  return command(args, what, timeout_);
}

reply connection::command(std::initializer_list<std::string_view> args, std::string_view what,
                          std::chrono::milliseconds timeout) {
  return checked(send(std::vector<std::string_view>(args), what, timeout), what);
}

std::pair<reply, reply> connection::eval_then(const script& s, std::initializer_list<std::string_view> keys,
                                              std::initializer_list<std::string_view> args,
                                              std::initializer_list<std::string_view> then, std::string_view what,
                                              std::chrono::milliseconds timeout, bool asking) {
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> eval = evalsha(s, nkeys, keys, args);
  const std::vector<std::string_view> next(then);
  const auto send_both = [&] {
    set_timeout(timeout);
    if (asking) append({"ASKING"}, what);
    append(eval, what);
    append(next, what);
    flush(what);
    reply asked = asking ? receive(what) : nullptr;
    std::pair<reply, reply> both;
    both.first = receive(what);
    both.second = receive(what);
    if (asked != nullptr && asked->type == REDIS_REPLY_ERROR) both.first = std::move(asked);
    return both;
  };
  std::pair<reply, reply> r = send_both();
  if (reloaded(*r.first, s, what)) r = send_both();
  return r;
}

reply connection::read_reply(std::string_view what) {
  if (broken_) fail(what, "connection lost");
  set_timeout(timeout_);
  return receive(what);
}

void connection::write(std::initializer_list<std::string_view> args, std::string_view what) {
  set_timeout(timeout_);
  append(std::vector<std::string_view>(args), what);
  flush(what);
}

reply connection::eval_skipped_then(const script& s, std::initializer_list<std::string_view> keys,
                                    std::initializer_list<std::string_view> args,
                                    std::initializer_list<std::string_view> then, std::string_view what,
                                    std::chrono::milliseconds timeout) {
  const std::string nkeys = std::to_string(keys.size());
  set_timeout(timeout);
  append({"CLIENT", "REPLY", "SKIP"}, what);
  append(evalsha(s, nkeys, keys, args), what);
  append(std::vector<std::string_view>(then), what);
  flush(what);
  return checked(receive(what), what);
}

bool connection::supports_reply_skip() {
  constexpr std::string_view what = "CLIENT REPLY SKIP";
  set_timeout(timeout_);
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
  return checked(eval_call(s, keys, args, what, false), what);
}

reply connection::call(const std::vector<std::string_view>& args, std::string_view what, bool asking) {
  return call(args, what, asking, timeout_);
}

reply connection::call(const std::vector<std::string_view>& args, std::string_view what, bool asking,
                       std::chrono::milliseconds timeout) {
  if (!asking) return send(args, what, timeout);
  set_timeout(timeout);
  append({"ASKING"}, what);
  append(args, what);
  flush(what);
  reply asked = receive(what);
  reply r = receive(what);
  return asked->type == REDIS_REPLY_ERROR ? std::move(asked) : std::move(r);
}

reply connection::eval_call(const script& s, std::initializer_list<std::string_view> keys,
                            std::initializer_list<std::string_view> args, std::string_view what, bool asking) {
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> argv = evalsha(s, nkeys, keys, args);
  reply r = call(argv, what, asking);
  if (reloaded(*r, s, what)) r = call(argv, what, asking);
  return r;
}

std::vector<reply> connection::eval_each(const script& s, const std::vector<std::vector<std::string>>& calls,
                                         std::string_view what, bool asking) {
  std::vector<reply> out(calls.size());
  std::vector<std::size_t> todo(calls.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::vector<std::string_view> argv;
  // The second pass resends what found the script forgotten; a script forgotten twice in a
  // row (SCRIPT FLUSH in between) comes back as its NOSCRIPT reply.
  for (int pass = 0; pass < 2 && !todo.empty(); ++pass) {
    set_timeout(timeout_);
    for (const std::size_t i : todo) {
      if (asking) append({"ASKING"}, what);
      argv.assign({"EVALSHA", s.sha});
      argv.insert(argv.end(), calls[i].begin(), calls[i].end());
      append(argv, what);
    }
    flush(what);
    std::vector<std::size_t> again;
    for (const std::size_t i : todo) {
      reply asked = asking ? receive(what) : nullptr;
      out[i] = receive(what);
      if (asked != nullptr && asked->type == REDIS_REPLY_ERROR) out[i] = std::move(asked);
      if (forgot(*out[i])) again.push_back(i);
    }
    if (!again.empty() && pass == 0) reloaded(*out[again.front()], s, what);
    todo = std::move(again);
  }
  return out;
}

std::vector<reply> connection::read_available() {
  constexpr std::string_view what = "subscriber read";
  if (broken_) fail(what, "connection lost");
  while (fill(what, nullptr)) {
  }
  std::vector<reply> out;
  while (reply r = parsed(what)) out.push_back(std::move(r));
  return out;
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
