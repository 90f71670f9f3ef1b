// Where exceptions with no caller to go to end up: printed to stderr, naming their source.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

namespace handoff::detail {

// Prints "handoff: exception thrown by <source>: <what()>" to stderr. Never throws.
void report_to_stderr(const std::exception_ptr& e, const char* source) noexcept;

// A key as it may appear in a message: at most `max_bytes` of it, then the full length
// ("player:42", or "aaaa…(2097152 bytes)"), so that a huge key never makes a huge message.
inline constexpr std::size_t key_excerpt_bytes = 64;
std::string key_excerpt(std::string_view key, std::size_t max_bytes = key_excerpt_bytes);

}  // namespace handoff::detail
