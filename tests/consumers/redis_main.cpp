// The handoff::redis consumer of tests/consumers (pkg-config way): compiled and linked with
// the flags of `pkg-config --cflags --libs handoff-redis` only, then run by run.cmake. Needs
// no server: a keyed_mutex pointed at a closed loopback port must report handoff::redis::error,
// which takes the library's connect path (hiredis) and its link to OpenSSL's symbols.
// Exit code 0 means every answer was right.
#include <handoff/redis/client_stats.hpp>
#include <handoff/redis/keyed_mutex.hpp>

#include <chrono>
#include <cstdio>

int main() {
  handoff::redis::options o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens on port 1: the connect is refused at once
  o.connect_timeout = std::chrono::milliseconds(500);
  try {
    handoff::redis::keyed_mutex m(o);
    const handoff::redis::client_stats stats = m.stats();
    std::fprintf(stderr, "handoff redis consumer: FAILED: connected to port 1 (%llu round trips)\n",
                 static_cast<unsigned long long>(stats.round_trips));
    return 1;
  } catch (const handoff::redis::error& e) {
    std::printf("handoff redis consumer: ok (%s)\n", e.what());
    return 0;
  }
}
