// A second process for the cross-process tests of handoff::redis::actor_system
// (redis_actor_*_test.cpp spawn it). Every handler records its run (redis_actor_check.hpp).
//
//   redis_actor_helper <port> <lease ms> send <tag> <count> <key>...
//       Posts "<tag> <i>" for i in [0, count) to the keys in turn; after each post returns,
//       RPUSH t:accepted:<tag> i. Handles what it owns (any key).
//   redis_actor_helper <port> <lease ms> hang <key>
//       Posts "hang 0" to key and handles it: its first delivery sets t:hanging and
//       sleeps for ever (an owner to be SIGKILLed mid-handler).
//   redis_actor_helper <port> <lease ms> delay <count> <delay ms> <key>...
//       Registers no handler (so it never sweeps) and posts "<due> <i>" with post_after
//       for i in [0, count) to the keys in turn, <due> the steady_clock ns before which it
//       must not run; after each, RPUSH t:accepted:delay i. Then sleeps (to be SIGKILLed).
//   redis_actor_helper <port> <lease ms> take <body>
//       Posts nothing: its sweeper takes over announced actors and handles their messages
//       with remember_handled, each handler adding 1 to the key's state; the first
//       delivery of <body> sets t:hanging and sleeps for ever (an owner to be SIGKILLed
//       mid-batch).
//
// <port> is the server of the actors and of the records; written <port>@<node port>, the
// actors run on the Redis Cluster node at <node port> (found by itself) instead, while the
// records stay on the one server at <port>.
//
// Exits 0 on success, 1 with a message on stderr on any failure.
#include <handoff/redis/actor_system.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "../support/redis_actor_check.hpp"

int main(int argc, char** argv) {
  try {
    if (argc < 5) throw std::runtime_error("usage: see redis_actor_helper.cpp");
    const std::string ports = argv[1];
    const int port = std::stoi(ports);
    handoff::redis::options o;
    const std::size_t at = ports.find('@');
    o.port = at == std::string::npos ? port : std::stoi(ports.substr(at + 1));
    handoff::redis::actor_options a;
    a.lease = handoff::lease{std::chrono::milliseconds(std::stoi(argv[2]))};
    a.sweep_interval = std::chrono::milliseconds(50);
    const std::string mode = argv[3];
    a.remember_handled = mode == "take";
    handoff::redis::actor_system actors(o, a);
    if (mode == "send" && argc >= 7) {
      actors.on("", [port](handoff::redis::delivery& d) { handoff::test::record_run(port, d); });
      const std::string tag = argv[4];
      const int count = std::stoi(argv[5]);
      const int keys = argc - 6;
      for (int i = 0; i < count; ++i) {
        actors.post(argv[6 + i % keys], tag + " " + std::to_string(i));
        handoff::test::actor_check_command(port, {"RPUSH", "t:accepted:" + tag, std::to_string(i)});
      }
      return 0;
    }
    if (mode == "hang") {
      actors.on("", [port](handoff::redis::delivery& d) {
        if (d.body() == "hang 0" && d.attempt() == 1) {
          handoff::test::actor_check_command(port, {"SET", "t:hanging", "1"});
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        handoff::test::record_run(port, d);
      });
      actors.post(argv[4], "hang 0");
      return 0;
    }
    if (mode == "delay" && argc >= 7) {
      const int count = std::stoi(argv[4]);
      const std::chrono::milliseconds delay(std::stoi(argv[5]));
      const int keys = argc - 6;
      for (int i = 0; i < count; ++i) {
        const long long due = handoff::test::monotonic_ns() + std::chrono::nanoseconds(delay).count();
        actors.post_after(argv[6 + i % keys], std::to_string(due) + " " + std::to_string(i), delay);
        handoff::test::actor_check_command(port, {"RPUSH", "t:accepted:delay", std::to_string(i)});
      }
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // killed by the test
    }
    if (mode == "take") {
      const std::string hang_at = argv[4];
      actors.on("", [port, hang_at](handoff::redis::delivery& d) {
        if (d.body() == hang_at && d.attempt() == 1) {
          handoff::test::actor_check_command(port, {"SET", "t:hanging", "1"});
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        handoff::test::record_run(port, d);
        d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
      });
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // killed by the test
    }
    throw std::runtime_error("unknown mode " + mode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_actor_helper: %s\n", e.what());
    return 1;
  }
}
