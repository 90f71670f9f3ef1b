#include "stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

namespace handoff::redis::detail {
namespace {

[[noreturn]] void throw_errno(std::string_view what, int e) {
  throw io_error(std::string(what) + std::generic_category().message(e));
}

// Waits until fd is ready for `events`, or throws io_error("timed out") at `by`.
void wait_for(int fd, short events, deadline by) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(by - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw io_error("timed out");
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (n > 0) return;  // ready, or an error the next send/recv reports
    if (n < 0 && errno != EINTR) throw_errno("poll: ", errno);
  }
}

struct fd_closer {
  int fd;
  explicit fd_closer(int f) noexcept : fd(f) {}
  fd_closer(const fd_closer&) = delete;
  fd_closer& operator=(const fd_closer&) = delete;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
  int release() noexcept { return std::exchange(fd, -1); }
};

// A non-blocking socket connected to `addr` before `by`; throws io_error.
int connect_to(const sockaddr* addr, socklen_t len, deadline by) {
  fd_closer s{::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) throw_errno("socket: ", errno);
  if (::connect(s.fd, addr, len) != 0) {
    if (errno != EINPROGRESS) throw_errno("", errno);
    wait_for(s.fd, POLLOUT, by);
    int err = 0;
    socklen_t err_len = sizeof err;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) throw_errno("getsockopt: ", errno);
    if (err != 0) throw_errno("", err);
  }
  return s.release();
}

// Keepalive as hiredis sets it: a dead peer is found within about 30 s of silence.
void tune_tcp(int fd) noexcept {
  const int on = 1;
  const int idle = 15;
  const int interval = 5;
  const int probes = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // commands are small and awaited
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

int connect_tcp(const std::string& host, int port, deadline by) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw io_error(std::string("cannot resolve the host: ") + ::gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string why = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    try {
      const int fd = connect_to(a->ai_addr, a->ai_addrlen, by);
      tune_tcp(fd);
      return fd;
    } catch (const io_error& e) {
      why = e.what();
      if (why == "timed out") break;  // the deadline is spent for every other address too
    }
  }
  throw io_error(why);
}

int connect_unix(const std::string& path, deadline by) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw io_error("the Unix socket path is too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return connect_to(reinterpret_cast<const sockaddr*>(&addr), sizeof addr, by);
}

class plain_stream final : public stream {
 public:
  explicit plain_stream(int fd) noexcept : stream(fd) {}
  void write_all(std::string_view bytes, deadline by) override { send_raw(bytes, by); }
  std::size_t read(char* buf, std::size_t cap, const deadline* by) override { return recv_raw(buf, cap, by); }
};

// OpenSSL's error queue of this thread, in words, emptied.
std::string ssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "unknown error" : out;
}

struct ctx_free {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};
struct ssl_free {
  void operator()(SSL* s) const noexcept { SSL_free(s); }
};

// A TLS session over the socket. The SSL object reads records from `in_` (fed by recv_raw)
// and writes them to `out_` (sent by send_raw): both memory BIOs, owned by the SSL object.
class tls_stream final : public stream {
 public:
  tls_stream(int fd, const options& o, deadline by) : stream(fd) {
    const tls_options& t = o.tls;
    ctx_.reset(SSL_CTX_new(TLS_client_method()));
    if (ctx_ == nullptr) throw io_error("TLS: " + ssl_errors());
    SSL_CTX_set_min_proto_version(ctx_.get(), TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx_.get(), SSL_VERIFY_PEER, nullptr);
    const int cas = t.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx_.get())
                                      : SSL_CTX_load_verify_locations(ctx_.get(), t.ca_file.c_str(), nullptr);
    if (cas != 1) throw io_error("TLS: cannot load the CA file '" + t.ca_file + "': " + ssl_errors());
    if (!t.cert_file.empty()) {
      if (SSL_CTX_use_certificate_chain_file(ctx_.get(), t.cert_file.c_str()) != 1) {
        throw io_error("TLS: cannot load the client certificate '" + t.cert_file + "': " + ssl_errors());
      }
      if (SSL_CTX_use_PrivateKey_file(ctx_.get(), t.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(ctx_.get()) != 1) {
        throw io_error("TLS: cannot load the client key '" + t.key_file + "': " + ssl_errors());
      }
    }
    ssl_.reset(SSL_new(ctx_.get()));
    BIO* in = BIO_new(BIO_s_mem());  // an empty memory BIO reads as "retry": SSL_ERROR_WANT_READ
    BIO* out = BIO_new(BIO_s_mem());
    if (ssl_ == nullptr || in == nullptr || out == nullptr) {
      BIO_free(in);
      BIO_free(out);
      throw io_error("TLS: " + ssl_errors());
    }
    SSL_set_bio(ssl_.get(), in, out);  // the SSL object owns both from here
    in_ = in;
    out_ = out;
    SSL_set_connect_state(ssl_.get());

    const std::string& name = t.server_name.empty() ? o.host : t.server_name;
    in6_addr ip{};
    const bool is_ip = ::inet_pton(AF_INET, name.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, name.c_str(), &ip) == 1;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_.get());
    const int named = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                            : X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
    if (named != 1) throw io_error("TLS: invalid server name '" + name + "'");
    if (!is_ip) SSL_set_tlsext_host_name(ssl_.get(), name.c_str());  // SNI takes names only

    handshake(by);
  }

  void write_all(std::string_view bytes, deadline by) override {
    ERR_clear_error();
    // A memory BIO takes any amount, so SSL_write encrypts all of it or fails.
    if (!bytes.empty() && SSL_write(ssl_.get(), bytes.data(), static_cast<int>(bytes.size())) <= 0) {
      throw io_error("TLS: " + ssl_errors());
    }
    send_pending(by);
  }

  // Decrypted bytes into buf: waits until `by` for a record when `by` is given, else returns
  // 0 when no whole record has arrived.
  std::size_t read(char* buf, std::size_t cap, const deadline* by) override {
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_read(ssl_.get(), buf, static_cast<int>(std::min<std::size_t>(cap, 1 << 30)));
      if (rc > 0) return static_cast<std::size_t>(rc);
      const int e = SSL_get_error(ssl_.get(), rc);
      if (e == SSL_ERROR_ZERO_RETURN) throw io_error("connection closed by the server");
      if (e != SSL_ERROR_WANT_READ) throw io_error("TLS: " + ssl_errors());
      send_pending(by != nullptr ? *by : std::chrono::steady_clock::now() + std::chrono::seconds(1));
      if (pull(by) == 0) return 0;
    }
  }

 private:
  void handshake(deadline by) {
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_do_handshake(ssl_.get());
      send_pending(by);
      if (rc == 1) return;
      if (SSL_get_error(ssl_.get(), rc) != SSL_ERROR_WANT_READ) {
        const long verified = SSL_get_verify_result(ssl_.get());
        if (verified != X509_V_OK) {
          throw io_error(std::string("TLS handshake: the server's certificate does not verify: ") +
                         X509_verify_cert_error_string(verified));
        }
        throw io_error("TLS handshake: " + ssl_errors() + " (is it a TLS port?)");
      }
      try {
        pull(&by);
      } catch (const io_error& e) {
        throw io_error(std::string("TLS handshake: ") + e.what() + " (is it a TLS port?)");
      }
    }
  }

  // Bytes from the socket into the in BIO, for OpenSSL to decrypt: as recv_raw, the number
  // read (0 only without `by`, when nothing has arrived).
  std::size_t pull(const deadline* by) {
    char raw[16384];
    const std::size_t n = recv_raw(raw, sizeof raw, by);
    if (n != 0) BIO_write(in_, raw, static_cast<int>(n));
    return n;
  }

  // Sends what OpenSSL wrote to the out BIO (records, handshake messages, alerts).
  void send_pending(deadline by) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(out_, &data);
    if (n <= 0) return;
    send_raw(std::string_view(data, static_cast<std::size_t>(n)), by);
    (void)BIO_reset(out_);
  }

  std::unique_ptr<SSL_CTX, ctx_free> ctx_;
  std::unique_ptr<SSL, ssl_free> ssl_;
  BIO* in_ = nullptr;   // owned by ssl_
  BIO* out_ = nullptr;  // owned by ssl_
};

}  // namespace

stream::~stream() { ::close(fd_); }

void stream::send_raw(std::string_view bytes, deadline by) const {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_for(fd_, POLLOUT, by);
    } else if (errno != EINTR) {
      throw_errno("", errno);
    }
  }
}

std::size_t stream::recv_raw(char* buf, std::size_t cap, const deadline* by) const {
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, cap, 0);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) throw io_error("connection closed by the server");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (by == nullptr) return 0;
      wait_for(fd_, POLLIN, *by);
    } else if (errno != EINTR) {
      throw_errno("", errno);
    }
  }
}

std::unique_ptr<stream> stream::open(const options& o, deadline by) {
  const int fd = o.unix_socket.empty() ? connect_tcp(o.host, o.port, by) : connect_unix(o.unix_socket, by);
  if (!o.tls.enabled) return std::make_unique<plain_stream>(fd);
  return std::make_unique<tls_stream>(fd, o, by);  // a throwing constructor closes fd in ~stream
}

}  // namespace handoff::redis::detail
