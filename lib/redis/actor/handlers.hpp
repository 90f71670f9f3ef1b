// The handlers of a handoff::redis::actor_system, by key family (private to lib/redis).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "handoff/redis/actor_system.hpp"

namespace handoff::redis::detail {

// Thread-safe. A handler is copied out (shared) before it runs, so that on() may replace
// it meanwhile.
class handler_registry {
 public:
  void on(std::string family, actor_system::handler h) {
    auto shared = std::make_shared<const actor_system::handler>(std::move(h));
    const std::lock_guard<std::mutex> lock(mu_);
    by_family_[std::move(family)] = std::move(shared);
  }

  // The handler of the longest family that is a prefix of `key`; null if none.
  [[nodiscard]] std::shared_ptr<const actor_system::handler> find(std::string_view key) const {
    const std::lock_guard<std::mutex> lock(mu_);
    // Scan back from the last family <= key.
    for (auto it = by_family_.upper_bound(key); it != by_family_.begin();) {
      --it;
      if (key.starts_with(it->first)) return it->second;
      if (it->first.empty()) break;
    }
    return nullptr;
  }

  // The families with a handler; just "" when "" is one (it matches every key).
  [[nodiscard]] std::vector<std::string> families() const {
    const std::lock_guard<std::mutex> lock(mu_);
    if (by_family_.contains("")) return {""};
    std::vector<std::string> out;
    out.reserve(by_family_.size());
    for (const auto& entry : by_family_) out.push_back(entry.first);
    return out;
  }

  [[nodiscard]] bool empty() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return by_family_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const actor_system::handler>, std::less<>> by_family_;  // guarded by mu_
};

}  // namespace handoff::redis::detail
