// Reporting exceptions that have no caller to go to (see detail/report.hpp).
#include "handoff/detail/report.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/test_driver.hpp"

namespace handoff::detail {

void report_to_stderr(const std::exception_ptr& e, const char* source) noexcept {
  if (tls.driver != nullptr) return tls.driver->unhandled(e, source);  // fails a test scheduler's run
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "handoff: exception thrown by %s: %s\n", source, ex.what());
  } catch (...) {
    std::fprintf(stderr, "handoff: exception thrown by %s (not a std::exception)\n", source);
  }
}

std::string key_excerpt(std::string_view key, std::size_t max_bytes) {
  if (key.size() <= max_bytes) return std::string(key);
  std::string s(key.substr(0, max_bytes));
  s += "...(" + std::to_string(key.size()) + " bytes)";
  return s;
}

}  // namespace handoff::detail
