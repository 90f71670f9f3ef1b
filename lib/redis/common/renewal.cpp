// Renewing a lease on the server: one round trip (see renewal.hpp).
#include "renewal.hpp"

namespace handoff::redis::detail {

renewal renew(connection& c, const script& s, std::initializer_list<std::string_view> keys,
              std::initializer_list<std::string_view> args, std::string_view what) {
  const std::int64_t sent = handoff::detail::now_ns();
  const reply r = c.eval(s, keys, args, what);
  return renewal_of(sent, *r);
}

}  // namespace handoff::redis::detail
