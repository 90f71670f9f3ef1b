// lib/redis/common/: what every Redis part shares and none owns: the connection and its
// pool (here), scripts by SHA and their reload, the Lua snippets (lua.hpp), key names
// (names.hpp), counters, leases as PX (lease_ms.hpp), random ids (ids.hpp) and the
// checks of options and server (options.cpp). It includes nothing of lock/, store/, actor/.
//
// One connection to the server (connect, TLS, AUTH, SELECT, commands with a timeout, Lua
// scripts by SHA) and a small pool of them. The bytes go over a stream (stream.hpp: TCP or
// Unix socket, TLS or not); hiredis only formats the commands and parses the replies. Every
// failure becomes a handoff::redis::error; a connection that failed is never reused.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "handoff/redis/options.hpp"
#include "stream.hpp"

namespace handoff::redis::detail {

struct client_counters;

struct reply_free {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply = std::unique_ptr<redisReply, reply_free>;

// The bytes a reply carries (a string, status or error reply's), or "" for any other.
inline std::string_view text(const redisReply& r) noexcept {
  return r.str != nullptr ? std::string_view(r.str, r.len) : std::string_view();
}

// For a reply of a shape the caller does not expect; `what` names the operation.
[[noreturn]] inline void unexpected(std::string_view what) {
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply from the server");
}

// A Lua script and its SHA1 (as SCRIPT LOAD returns it, filled in by the first load).
struct script {
  std::string source;
  std::string sha;
};

class connection {
 public:
  // Connects (TCP or Unix socket, TLS as options::tls says), then AUTH (or a PING, so that
  // a server that speaks another protocol fails here) and SELECT as options say, all within
  // options::connect_timeout. Throws error. Counts its round trips after those into
  // `counters` when given.
  explicit connection(const options& o, client_counters* counters = nullptr);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // True once an I/O error, a timeout or a protocol error happened: the connection must be
  // dropped.
  [[nodiscard]] bool broken() const noexcept { return broken_; }

  // For an idle connection (no reply pending): true if the server closed it or sent
  // something unasked (a restart or a timeout on the server's side). One poll(), no round
  // trip: a command on such a connection would fail after it may have run. (Over TLS a
  // readable socket may carry only a session ticket: that is read, and is not stale.)
  [[nodiscard]] bool stale() noexcept;

  // Sends a command and waits for its reply. Throws error (prefixed by `what`) on I/O
  // failure, timeout or an error reply.
  reply command(std::initializer_list<std::string_view> args, std::string_view what);

  // command() with a reply timeout of `timeout` instead of options::command_timeout, for
  // a blocking command (BLPOP).
  reply command(std::initializer_list<std::string_view> args, std::string_view what, std::chrono::milliseconds timeout);

  // EVALSHA of s with `then` sent behind it in the same write (one round trip), waiting
  // `timeout` for the replies; both replies as they come, error replies included (with
  // `asking`, ASKING goes first, for the script only: see call()). A script the server forgot
  // is loaded again and the pair resent. Throws error (prefixed by `what`) for an I/O
  // failure or a timeout.
  std::pair<reply, reply> eval_then(const script& s, std::initializer_list<std::string_view> keys,
                                    std::initializer_list<std::string_view> args,
                                    std::initializer_list<std::string_view> then, std::string_view what,
                                    std::chrono::milliseconds timeout, bool asking = false);

  // eval_then with CLIENT REPLY SKIP in front: only `then`'s reply comes back, so that the
  // server writes one reply and the caller wakes once. The script's reply is not sent, nor
  // any error it raises (NOSCRIPT included): the script must report through `then`, and
  // the caller must run it with eval_then now and then to see its errors.
  reply eval_skipped_then(const script& s, std::initializer_list<std::string_view> keys,
                          std::initializer_list<std::string_view> args, std::initializer_list<std::string_view> then,
                          std::string_view what, std::chrono::milliseconds timeout);

  // Whether the server honours CLIENT REPLY SKIP (Redis 3.2 and later): one round trip,
  // with a PING behind it. Throws error like command().
  bool supports_reply_skip();

  // SCRIPT LOAD: sets s.sha. Done once per script, before eval() may run concurrently.
  void load(script& s);

  // EVALSHA, loading the script again if the server forgot it (restarted server, SCRIPT
  // FLUSH). Throws error like command().
  reply eval(const script& s, std::initializer_list<std::string_view> keys,
             std::initializer_list<std::string_view> args, std::string_view what);

  // EVALSHA of s once per call, all in one write (one round trip). Each call is the
  // number of keys, the keys, then the arguments. Returns the replies in order; an error
  // reply is returned as it is (it belongs to its call), except NOSCRIPT: the script is
  // loaded again and those calls resent. Throws error (prefixed by `what`) on I/O failure
  // or timeout: then which calls ran is unknown. With `asking`, ASKING goes before each call
  // (see call()).
  std::vector<reply> eval_each(const script& s, const std::vector<std::vector<std::string>>& calls,
                               std::string_view what, bool asking = false);

  // For a router (router.hpp): the reply as it comes, error replies included (a cluster's
  // MOVED and ASK among them); with `asking`, ASKING goes first, in the same write. eval_call
  // loads the script again when the server forgot it, as eval() does. Throws error (prefixed
  // by `what`) on I/O failure or timeout.
  reply call(const std::vector<std::string_view>& args, std::string_view what, bool asking);
  // call() waiting `timeout` for the reply instead of options::command_timeout (BLPOP).
  reply call(const std::vector<std::string_view>& args, std::string_view what, bool asking,
             std::chrono::milliseconds timeout);
  reply eval_call(const script& s, std::initializer_list<std::string_view> keys,
                  std::initializer_list<std::string_view> args, std::string_view what, bool asking);

  // For a subscriber: the socket, a command written without waiting for its reply (which
  // comes among the messages), and replies read after poll() said it is readable.
  [[nodiscard]] int fd() const noexcept { return stream_->fd(); }
  void write(std::initializer_list<std::string_view> args, std::string_view what);
  // The next reply, waiting up to options::command_timeout. Throws error when none comes.
  reply read_reply(std::string_view what);
  // Reads what arrived; returns the complete replies. Throws error when the connection failed.
  std::vector<reply> read_available();

 private:
  struct reader_free {
    void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
  };

  // Marks the connection broken and throws error: "handoff::redis: <what>: <why>".
  [[noreturn]] void fail(std::string_view what, std::string_view why);
  // The first command, within the connect deadline; throws error naming `where`.
  void greet(const options& o, const std::string& where, deadline by);
  // The one NOSCRIPT path of eval and eval_then: if r, the reply to an EVALSHA of s, says
  // the server forgot s (a restarted server, SCRIPT FLUSH), loads s again and returns true:
  // the caller sends once more. Throws error like command() if the load fails.
  bool reloaded(const redisReply& r, const script& s, std::string_view what);
  reply send(const std::vector<std::string_view>& args, std::string_view what, std::chrono::milliseconds timeout);
  // Formats a command into out_ (sent by flush).
  void append(const std::vector<std::string_view>& args, std::string_view what);
  // The next reply, read within the current timeout.
  reply receive(std::string_view what);
  // The next reply already parsed, or nullptr. Throws error on a protocol error.
  reply parsed(std::string_view what);
  // Reads once from the stream into the reply reader (stream::read: waiting until `by`, or
  // not at all with nullptr); false when nothing had arrived. Throws error on failure.
  bool fill(std::string_view what, const deadline* by);
  void set_timeout(std::chrono::milliseconds t) noexcept { io_timeout_ = t; }
  // Writes out_ within the current timeout; throws error on failure.
  void flush(std::string_view what);
  [[nodiscard]] deadline due() const noexcept { return std::chrono::steady_clock::now() + io_timeout_; }

  std::unique_ptr<stream> stream_;
  std::unique_ptr<redisReader, reader_free> reader_;  // the replies read and not yet taken
  std::string out_;                                   // commands formatted, not yet written
  bool broken_ = false;
  std::chrono::milliseconds timeout_;     // options::command_timeout
  std::chrono::milliseconds io_timeout_;  // the wait of each write and each reply now
  client_counters* counters_ = nullptr;   // nullptr: not counted
};

// The reply, or error ("handoff::redis: <what>: <the server's message>") for an error reply.
reply checked(reply r, std::string_view what);

// Throws std::invalid_argument for nonsensical options (see keyed_mutex's constructor).
void validate(const options& o);
// validate(o), then o: for a client's member initializer.
options validated(options o);
// Whether the server of c is a Redis Cluster node (INFO cluster). Throws error.
bool is_cluster_node(connection& c);

// The checks every client makes of the servers before using them (through a router,
// router.hpp): applies options::if_server_evicts to every primary (throws error for
// refuse, prints a warning for warn; `what` names what an evicted key would break), then
// claims the prefix for this version's data format (format.hpp) on the node that holds
// its marker: throws error if data of another format is there.
class router;
void check_server(router& r, const options& o, std::string_view what);

// Command connections shared by the callers of one keyed_mutex: at most options::pool_size
// open at once; a caller takes one for one command (or script) and gives it back.
class pool {
 public:
  // At most `max` connections open at once (options::pool_size for the command pool).
  // Counts round trips and reconnects into `counters` when given.
  pool(const options& o, std::size_t max, client_counters* counters = nullptr)
      : o_(o), max_(max), counters_(counters) {}

  class handle {
   public:
    handle(pool& p, std::unique_ptr<connection> c) : p_(p), c_(std::move(c)) {}
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    ~handle() { p_.give_back(std::move(c_)); }
    connection* operator->() const noexcept { return c_.get(); }
    connection& operator*() const noexcept { return *c_; }

   private:
    pool& p_;
    std::unique_ptr<connection> c_;
  };

  // Thread-safe. An idle connection, a new one (connecting), or, when pool_size are in
  // use, the next one given back; throws error if none comes back within the command
  // timeout or the connect fails.
  handle take();

 private:
  void give_back(std::unique_ptr<connection> c) noexcept;

  const options& o_;
  const std::size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;                     // a connection was given back
  std::vector<std::unique_ptr<connection>> idle_;  // guarded by mu_
  std::size_t open_ = 0;                           // guarded by mu_: idle + taken
  client_counters* const counters_;
  std::size_t lost_ = 0;  // guarded by mu_: connections dropped broken or stale, not yet replaced
};

}  // namespace handoff::redis::detail
