// The byte stream under a Redis connection: a TCP or Unix socket, optionally with TLS
// (OpenSSL), that the connection writes commands to and reads replies from. The socket is
// non-blocking and every call that waits takes a deadline, so no call blocks past it.
//
// TLS runs over two memory BIOs: OpenSSL only encrypts and decrypts, and every byte on the
// socket goes through this file's send() (MSG_NOSIGNAL: a closed connection is an error,
// never a SIGPIPE that ends the host) and recv(). The peer is always verified: against
// tls_options::ca_file (or the system's CAs), with its name checked against
// tls_options::server_name (or options::host).
//
// Failures throw io_error; the stream must then be dropped. Not thread-safe: one thread uses
// a stream at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "handoff/redis/options.hpp"

namespace handoff::redis::detail {

using deadline = std::chrono::steady_clock::time_point;

// What went wrong on the stream, in words ("timed out", "connection closed by the server",
// "TLS: certificate verify failed: ..."); the connection adds what it was doing.
class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class stream {
 public:
  // Connects to options::unix_socket or host:port, and with options::tls.enabled makes the
  // TLS handshake, all before `by`. Throws io_error.
  static std::unique_ptr<stream> open(const options& o, deadline by);

  virtual ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  // Writes all of `bytes` before `by`. Throws io_error.
  virtual void write_all(std::string_view bytes, deadline by) = 0;
  // Reads at most `cap` bytes: with `by`, at least one, waiting until then; with nullptr,
  // what has arrived, 0 when nothing has. Throws io_error, also for the server closing the
  // connection.
  virtual std::size_t read(char* buf, std::size_t cap, const deadline* by) = 0;

  // The socket, for poll().
  [[nodiscard]] int fd() const noexcept { return fd_; }

 protected:
  explicit stream(int fd) noexcept : fd_(fd) {}

  // The socket's own steps, shared by both kinds. recv_raw: bytes read, 0 when none are
  // there and `by` is nullptr (no wait); throws io_error on a closed connection or a timeout.
  void send_raw(std::string_view bytes, deadline by) const;
  std::size_t recv_raw(char* buf, std::size_t cap, const deadline* by) const;

 private:
  int fd_;  // owned: closed by the destructor
};

}  // namespace handoff::redis::detail
