#include "dpl/core/error.hpp"

#include <cstring>
#include <string>

namespace dpl::detail {

namespace {
// __FILE__ is the path the compiler was given, absolute in our builds; the part below the source
// tree is what identifies a check on any machine.
std::string source_relative(const char* file) {
#ifdef DPL_SOURCE_DIR
  constexpr const char* root = DPL_SOURCE_DIR "/";
  const std::size_t n = std::strlen(root);
  if (std::strncmp(file, root, n) == 0) return file + n;
#endif
  return file;
}
}  // namespace

void throw_error(const char* file, int line, const std::string& message) {
  // The message stands alone: users read it, so it carries no source location of ours; the
  // location goes to where().
  throw Error(message, source_relative(file) + ":" + std::to_string(line));
}

}  // namespace dpl::detail
