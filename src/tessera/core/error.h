// The core layer: tensors, the arena, dtypes, RNG, threading and errors. It knows nothing of
// models, kernels or applications and must never depend on anything above it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera {

// Every user-facing failure is an Error whose message names the file, key or value at fault,
// so the CLI can print it on one line and exit non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) fail(format, std::forward<Args>(args)...);
}

}  // namespace tessera
