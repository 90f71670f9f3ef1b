// The code of docs/redis.md, compiled and checked against a real redis-server.
//
// Every block the guide quotes sits between `// [snippet:NAME]` and `// [/snippet]`, and
// the guide's copy is compared with it by the `example_redis_snippets` test
// (check_snippets.py). Edit a snippet here first, then paste it into the guide.
//
// main() starts a private redis-server on a free loopback port (the tests' helper,
// tests/support/redis_server.hpp), then runs each snippet with two keyed_mutex objects, as
// two processes would, and checks what the guide says about it; a failed check exits with
// status 1.
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "expect.hpp"
#include "redis_server.hpp"

using namespace std::chrono_literals;
using example::expect;

namespace {

// A downstream store that remembers the highest fencing token per key and refuses lower
// ones (a database row with a token column, in a real system).
class player_store {
 public:
  bool write(const std::string& player, std::uint64_t token, long gold) {
    std::lock_guard lock(mutex_);
    row& r = rows_[player];
    if (token < r.token) return false;  // a later holder has written: this one is stale
    r = {token, gold};
    return true;
  }
  long gold(const std::string& player) {
    std::lock_guard lock(mutex_);
    return rows_[player].gold;
  }

 private:
  struct row {
    std::uint64_t token = 0;
    long gold = 0;
  };
  std::mutex mutex_;
  std::map<std::string, row> rows_;
};

handoff::redis::options options_for(int port) {
  // [snippet:options]
  handoff::redis::options o;
  o.host = "127.0.0.1";
  o.port = port;              // or o.unix_socket = "/run/redis/redis.sock"
  o.prefix = "game:locks:";   // every Redis key and channel of these locks starts with it
  o.command_timeout = 500ms;  // each step of a call: see "Failure behaviour" for the bound
  o.watchdog_lease = 10s;     // lock() without a lease: a crashed holder's key frees after 10 s
  // [/snippet]
  return o;
}

// [snippet:per_player]
// Any process of the game server may handle player 42's request: the key serializes them.
void add_gold(handoff::redis::keyed_mutex& locks, player_store& store, const std::string& id, long n) {
  auto g = locks.lock("player:" + id);   // FIFO across processes; no polling
  const long gold = store.gold(id) + n;  // read-modify-write under the key
  store.write(id, g.token(), gold);      // refused (false) if a later holder wrote first
}  // ~guard unlocks (compare-and-delete on the server) and wakes the next waiter
// [/snippet]

// [snippet:lease]
// A bounded hold: Redis frees the key 2 s after the grant even if this process hangs.
bool settle(handoff::redis::keyed_mutex& locks, player_store& store, const std::string& id,
            const std::vector<long>& rewards) {
  auto g = locks.lock("player:" + id, handoff::lease{2s});
  long gold = store.gold(id);
  for (long r : rewards) {
    g.check();                                                 // throws handoff::lock_expired once over
    if (!store.write(id, g.token(), gold += r)) return false;  // fenced: what check() cannot close
    if (!g.extend(handoff::lease{2s})) return false;           // 2 s from now, on the server
  }
  return true;
}
// [/snippet]

// [snippet:try_lock_for]
bool try_join_room(handoff::redis::keyed_mutex& locks, const std::string& room) {
  auto g = locks.try_lock_for("room:" + room, 50ms);  // queued FIFO for at most 50 ms
  if (!g) return false;                               // timed out: left the queue, never granted
  // ... the room is ours until g unlocks ...
  return true;
}
// [/snippet]

// [snippet:task]
// The smallest coroutine type that can co_await: it starts at once and frees itself when
// it finishes. Nothing destroys it while it is suspended.
struct task {
  struct promise_type {
    task get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};
// [/snippet]

// [snippet:async_lock]
task add_gold_async(handoff::redis::keyed_mutex& locks, player_store& store, std::string id, long n,
                    std::promise<void> done) {
  try {
    auto g = co_await locks.async_lock("player:" + id);  // no thread blocks while it waits
    // Resumed on locks' callback thread: keep this short, or hop to your executor.
    store.write(id, g.token(), store.gold(id) + n);
  } catch (const handoff::redis::error&) {  // Redis unreachable: thrown from the co_await
    done.set_exception(std::current_exception());
    co_return;
  }
  done.set_value();
}
// [/snippet]

// A courier booking: slow, and not to be done twice for one order.
int couriers_booked = 0;
void book_courier(const std::string& /*order*/) { ++couriers_booked; }

// [snippet:fenced_write]
// Pessimistic: hold the order while a slow step that must not run twice runs, then write
// with the grant's token. A holder paused past its lease is refused, whoever holds the key
// now and whether or not it has written yet.
bool ship(handoff::redis::keyed_mutex& locks, handoff::redis::fenced_store& orders, const std::string& id) {
  const std::string key = "order:" + id;
  auto g = locks.lock(key, handoff::lease{5s});
  const handoff::redis::fenced_value order = orders.read(key);  // {value, token of its write}
  if (order.value != "paid") return false;                      // shipped already, or unpaid
  book_courier(id);                                             // under the lock: once per order
  return orders.write(key, "shipped", g.token());               // false: our lease ran out meanwhile
}
// [/snippet]

// [snippet:versioned_update]
// Optimistic: no lock. Read, compute, write if nobody wrote since; otherwise compute again
// from the newer record. The function may run more than once: keep it free of effects.
bool add_to_cart(handoff::redis::versioned_store& carts, const std::string& user, const std::string& item) {
  const std::optional<handoff::redis::versioned_value> written = carts.update(
      "cart:" + user,
      [&](const handoff::redis::versioned_value& cart) { return cart.value.empty() ? item : cart.value + "," + item; });
  return written.has_value();  // std::nullopt: 16 other writers came first, one after the other
}
// [/snippet]

// [snippet:versioned_form]
// The version travels with a form: the address changes only if nobody changed it since
// the form was shown (a lock cannot be held across a user's think time).
struct address_form {
  std::string address;
  std::uint64_t version;  // a hidden field
};
address_form show(handoff::redis::versioned_store& addresses, const std::string& order) {
  handoff::redis::versioned_value v = addresses.read("address:" + order);
  return {std::move(v.value), v.version};
}
bool submit(handoff::redis::versioned_store& addresses, const std::string& order, const address_form& f) {
  return addresses.compare_and_set("address:" + order, f.version, f.address);  // false: reload
}
// [/snippet]

// [snippet:tls]
handoff::redis::options tls_to(const std::string& host) {
  handoff::redis::options o;
  o.host = host;
  o.port = 6380;  // the server's --tls-port
  o.tls.enabled = true;
  o.tls.ca_file = "/etc/redis/ca.crt";      // empty: the system's CAs
  o.tls.cert_file = "/etc/app/client.crt";  // only for a server with tls-auth-clients yes
  o.tls.key_file = "/etc/app/client.key";
  return o;  // handoff::redis::keyed_mutex locks(tls_to("redis.internal"));
}
// [/snippet]

bool unreachable_server_is_an_error() {
  // [snippet:errors]
  handoff::redis::options o;
  o.port = 1;  // nothing listens there
  o.connect_timeout = 200ms;
  try {
    handoff::redis::keyed_mutex locks(o);  // connects once to check the options
  } catch (const handoff::redis::error& e) {
    const std::string what = e.what();  // "handoff::redis: connect to 127.0.0.1:1: Connection refused"
    return what.find("connect to 127.0.0.1:1") != std::string::npos;
  }
  // [/snippet]
  return false;
}

}  // namespace

int main() {
  handoff::test::redis_server server;  // a private redis-server, stopped at the end of main
  // Two clients of one server, as two processes of the game server would have.
  handoff::redis::keyed_mutex a(options_for(server.port()));
  handoff::redis::keyed_mutex b(options_for(server.port()));
  player_store store;

  // per_player: serialized across clients; tokens grow across clients.
  {
    std::thread t([&] {
      for (int i = 0; i < 50; ++i) add_gold(a, store, "42", 1);
    });
    for (int i = 0; i < 50; ++i) add_gold(b, store, "42", 1);
    t.join();
    expect(store.gold("42") == 100, "add_gold from two clients: no update lost");
    auto g1 = a.lock("player:42");
    const std::uint64_t t1 = g1.token();
    g1.unlock();
    auto g2 = b.lock("player:42");
    expect(g2.token() > t1, "the next grant's token is greater, whichever client gets it");
  }

  // Held by one client: the other's try_lock fails at once; try_lock_for times out.
  {
    auto held = a.lock("room:7");
    expect(!b.try_lock("room:7").owns_lock(), "try_lock fails while another client holds the key");
    expect(!try_join_room(b, "7"), "try_lock_for gives up after its wait");
    held.unlock();
    expect(try_join_room(b, "7"), "try_lock_for succeeds once the key is free");
  }

  // settle: a lease, extended per step.
  expect(settle(a, store, "7", {10, 20, 30}), "settle with a lease and extend");
  expect(store.gold("7") == 60, "settle wrote every reward");

  // A hold whose lease ran out: expired() by the local clock, check() throws, and the next
  // holder's token fences the stale one out of the store.
  {
    auto slow = a.lock("player:9", handoff::lease{50ms});
    std::this_thread::sleep_for(100ms);
    expect(slow.expired() && !slow.owns_lock(), "the lease ran out: expired() by the local clock");
    bool threw = false;
    try {
      slow.check();
    } catch (const handoff::lock_expired&) {
      threw = true;
    }
    expect(threw, "check() throws lock_expired after the lease");
    auto next = b.try_lock("player:9");
    expect(next.owns_lock(), "the server freed the key at the lease");
    expect(store.write("9", next.token(), 5), "the new holder writes");
    expect(!store.write("9", slow.token(), 1), "the stale holder's write is refused by its token");
  }

  // async_lock: waits behind b's hold, resumed on a's callback thread.
  {
    auto held = b.lock("player:5");
    std::promise<void> done;
    auto finished = done.get_future();
    add_gold_async(a, store, "5", 7, std::move(done));
    expect(finished.wait_for(50ms) == std::future_status::timeout, "the coroutine waits while b holds the key");
    held.unlock();
    expect(finished.wait_for(5s) == std::future_status::ready, "resumed once b unlocked");
    finished.get();
    expect(store.gold("5") == 7, "the coroutine wrote under the key");
  }

  // ship: a fenced write under the lock; a stale holder's write is refused.
  {
    handoff::redis::fenced_store orders(options_for(server.port()));
    const std::uint64_t seller = a.lock("order:1").token();  // the seller's grant marks it paid
    expect(orders.write("order:1", "paid", seller), "a fenced write with a fresh token stores");
    expect(ship(b, orders, "1"), "ship a paid order");
    expect(!ship(a, orders, "1") && couriers_booked == 1, "a shipped order ships once");
    expect(orders.read("order:1").value == "shipped", "the record says shipped");

    auto stale = a.lock("order:2", handoff::lease{50ms});
    std::this_thread::sleep_for(100ms);  // paused past the lease
    auto next = b.lock("order:2");       // granted again, nothing written yet
    expect(!orders.write("order:2", "late", stale.token()), "the stale holder is refused before its successor writes");
    expect(orders.write("order:2", "paid", next.token()), "the current holder writes");
  }

  // add_to_cart and the form: optimistic writes, from two threads and across a think time.
  {
    handoff::redis::versioned_store carts(options_for(server.port()));
    std::thread t([&] {
      for (int i = 0; i < 20; ++i) expect(add_to_cart(carts, "7", "a"), "add_to_cart from thread 1");
    });
    for (int i = 0; i < 20; ++i) expect(add_to_cart(carts, "7", "b"), "add_to_cart from thread 2");
    t.join();
    const handoff::redis::versioned_value cart = carts.read("cart:7");
    expect(cart.version == 40 && cart.value.size() == 40 * 2 - 1, "40 items in the cart: no update lost");

    const address_form mine = show(carts, "9");
    address_form theirs = show(carts, "9");
    theirs.address = "1 Main St";
    expect(submit(carts, "9", theirs), "the first form submitted wins");
    expect(!submit(carts, "9", mine), "a form shown before that change is refused");
  }

  expect(unreachable_server_is_an_error(), "an unreachable server is a handoff::redis::error, not a hang");
  const handoff::redis::options tls = tls_to("redis.internal");
  expect(tls.tls.enabled && tls.host == "redis.internal" && tls.tls.server_name.empty(),
         "TLS options name the CA and client certificate; the certificate is checked against host");
  return 0;
}
