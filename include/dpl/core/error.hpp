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
  /// An error with message `message` (what()) raised at `where` ("file:line", or empty).
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}

  /// Where the error was raised, as "file:line" with the file relative to dpl's source tree
  /// (e.g. "src/autograd/ops/linear.cpp:38"); empty for an Error made without a location. Kept out of
  /// what(), which is written for users, so that a report or debugger can still find the check.
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

namespace detail {
/// Concatenates any streamable values into one string (used to build error messages).
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
/// Throws dpl::Error(message) with where() = file (relative to dpl's source tree when it lies
/// inside it) and line.
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
