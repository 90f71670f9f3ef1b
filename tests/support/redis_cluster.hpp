// handoff::test::redis_cluster: a throwaway Redis Cluster on loopback, for the tests of
// handoff::redis on a cluster. Six redis_server processes (--cluster-enabled yes,
// --cluster-node-timeout 500), joined by `redis-cli --cluster create ... --cluster-replicas
// 1`: three primaries with a replica each, about 2-3 s to start (or three primaries alone,
// for redis_bench). Start one per test binary
// (a static in the test file), not one per test.
//
//   handoff::test::redis_cluster cluster;
//   handoff::redis::fenced_store s({.port = cluster.seed_port()});
//   cluster.migrate(slot, to_port, step::keys_moved);   // a resharding, stopped part way
//
// Not thread-safe: one thread drives it.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>

#include "redis_server.hpp"
#include "redis_test_support.hpp"

namespace handoff::test {

class redis_cluster {
 public:
  // What a node takes beyond the fixture's arguments (TLS ports and files, say), and the
  // port redis-cli --cluster create reaches it on (0: its plain port).
  struct node_setup {
    std::vector<std::string> args;
    int create_port = 0;
  };

  // Three primaries with `replicas` replicas each (a benchmark takes none); each node also
  // takes node() (called once per node), and redis-cli takes cli_args (--tls, ...).
  explicit redis_cluster(int replicas = 1, const std::function<node_setup()>& node = {},
                         const std::vector<std::string>& cli_args = {}) {
    std::vector<std::string> args{"redis-cli", "--cluster", "create"};
    for (int i = 0; i < 3 * (1 + replicas); ++i) {
      node_setup extra = node ? node() : node_setup{};
      std::vector<std::string> node_args{"--cluster-enabled",      "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "500"};
      node_args.insert(node_args.end(), extra.args.begin(), extra.args.end());
      nodes_.push_back(std::make_unique<redis_server>(node_args));
      create_ports_.push_back(extra.create_port != 0 ? extra.create_port : nodes_.back()->port());
      args.push_back("127.0.0.1:" + std::to_string(create_ports_.back()));
    }
    args.insert(args.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
    args.insert(args.end(), cli_args.begin(), cli_args.end());
    run(args);
    wait_until_ok();
  }

  // The seed's port that redis-cli created the cluster through (a TLS cluster's TLS port).
  [[nodiscard]] int seed_create_port() const { return create_ports_.front(); }

  // A node to start from: any primary.
  [[nodiscard]] int seed_port() const { return nodes_.front()->port(); }

  // The port of the primary that serves `slot` now.
  [[nodiscard]] int primary_of(int slot) const {
    raw_redis r(seed_port());
    const auto reply = r.command({"CLUSTER", "SLOTS"});
    for (std::size_t i = 0; i < reply->elements; ++i) {
      const redisReply* range = reply->element[i];
      if (range->element[0]->integer <= slot && slot <= range->element[1]->integer) {
        return static_cast<int>(range->element[2]->element[1]->integer);
      }
    }
    throw std::runtime_error("redis_cluster: no primary serves slot " + std::to_string(slot));
  }

  // The ports of the three primaries.
  [[nodiscard]] std::vector<int> primaries() const {
    return {primary_of(0), primary_of(cluster_slots / 3 + 1), primary_of(cluster_slots - 1)};
  }

  // Moving `slot` to the primary at `to`, the steps of `redis-cli --cluster reshard`:
  enum class step {
    importing,   // the target imports it, the source migrates it: new keys answer ASK
    keys_moved,  // and every key of the slot has moved (MIGRATE): every key answers ASK
    done,        // and every node says the target owns it: the source answers MOVED
  };
  void migrate(int slot, int to, step until) {
    const int from = primary_of(slot);
    raw_redis source(from);
    raw_redis target(to);
    const std::string s = std::to_string(slot);
    target.command({"CLUSTER", "SETSLOT", s, "IMPORTING", target_id(from)});
    source.command({"CLUSTER", "SETSLOT", s, "MIGRATING", target_id(to)});
    if (until == step::importing) return;
    for (;;) {
      const auto keys = source.strings({"CLUSTER", "GETKEYSINSLOT", s, "100"});
      if (keys.empty()) break;
      std::vector<std::string> cmd{"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000", "KEYS"};
      cmd.insert(cmd.end(), keys.begin(), keys.end());
      source.command(cmd);
    }
    if (until == step::keys_moved) return;
    // The order redis-cli follows: the target, the source, then the others (so that no
    // node sends a client back and forth between the two).
    const std::string owner = target_id(to);
    const std::vector<int> others = primaries();
    target.command({"CLUSTER", "SETSLOT", s, "NODE", owner});
    source.command({"CLUSTER", "SETSLOT", s, "NODE", owner});
    for (const int p : others) {
      if (p != to && p != from) raw_redis(p).command({"CLUSTER", "SETSLOT", s, "NODE", owner});
    }
  }

  // The port of a replica of the primary at `port` that holds `key` (READONLY reads), once
  // one does (at most 5 s): replication is asynchronous.
  [[nodiscard]] int replica_holding(int port, const std::string& key) const {
    const std::string id = target_id(port);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      for (const auto& n : nodes_) {
        if (!n->running() || n->port() == port) continue;
        raw_redis r(n->port());
        if (r.string({"INFO", "replication"}).find("master_port:" + std::to_string(port)) == std::string::npos)
          continue;
        r.command({"READONLY"});
        if (r.integer({"EXISTS", key}) == 1) return n->port();
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("redis_cluster: no replica holds " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The port of the replica of the primary at `port`.
  [[nodiscard]] int replica_of(int port) const {
    for (const auto& n : nodes_) {
      if (n->running() && n->port() != port &&
          raw_redis(n->port()).string({"INFO", "replication"}).find("master_port:" + std::to_string(port)) !=
              std::string::npos) {
        return n->port();
      }
    }
    throw std::runtime_error("redis_cluster: the node at " + std::to_string(port) + " has no replica");
  }

  // Every running node says the cluster is ok (at most 20 s): after a failover, nodes
  // learn of the promotion at different times and answer CLUSTERDOWN meanwhile.
  void wait_until_serving() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      bool ok = true;
      for (const auto& n : nodes_) {
        if (n->running() &&
            raw_redis(n->port()).string({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) {
          ok = false;
        }
      }
      if (ok) return;
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("redis_cluster: not ok within 20 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // SIGSTOP and SIGCONT to the node at `port`: it stops and resumes answering, its sockets
  // open meanwhile.
  void pause(int port) { signal(port, SIGSTOP); }
  void resume(int port) { signal(port, SIGCONT); }

  // SIGKILL to the node at `port` (a crash); its replica takes over after
  // --cluster-node-timeout and an election. The cluster is then one replica short.
  void kill(int port) {
    for (const auto& n : nodes_) {
      if (n->port() == port) n->kill();
    }
  }

  static constexpr int cluster_slots = 16384;

 private:
  void signal(int port, int sig) {
    for (const auto& n : nodes_) {
      if (n->port() == port && n->running()) ::kill(n->pid(), sig);
    }
  }

  // The node id of the node at `port`.
  static std::string target_id(int port) { return raw_redis(port).string({"CLUSTER", "MYID"}); }

  static void run(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("redis_cluster: cannot run redis-cli");
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("redis_cluster: redis-cli --cluster create failed");
  }

  // Every node agrees the cluster is up and knows all six nodes (at most 20 s).
  void wait_until_ok() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      bool ok = true;
      for (const auto& n : nodes_) {
        const std::string info = raw_redis(n->port()).string({"CLUSTER", "INFO"});
        ok = ok && info.find("cluster_state:ok") != std::string::npos &&
             info.find("cluster_known_nodes:" + std::to_string(nodes_.size())) != std::string::npos;
      }
      if (ok) return;
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("redis_cluster: not ok within 20 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<int> create_ports_;  // as node_setup::create_port, per node
};

}  // namespace handoff::test
