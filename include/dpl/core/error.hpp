#pragma once
// dpl::Error and the DPL_CHECK family: every rejected input raises dpl::Error with a message
// that names the operation, what it expected and what it received.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dpl {

/// The one exception type dpl throws for bad input, failed backend calls and broken invariants.
/// what() is a complete, human-readable sentence: the operation, the expectation, the value seen.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
/// Concatenates any streamable values into one string (used to build error messages).
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace dpl

/// Throws dpl::Error with the concatenated message when cond is false.
#define DPL_CHECK(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond)) ::dpl::detail::throw_error(__FILE__, __LINE__, ::dpl::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws dpl::Error with the concatenated message unconditionally.
#define DPL_FAIL(...) ::dpl::detail::throw_error(__FILE__, __LINE__, ::dpl::detail::concat(__VA_ARGS__))
