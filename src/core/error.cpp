#include "dpl/core/error.hpp"

#include <cstring>
#include <string>

namespace dpl::detail {

namespace {
// __FILE__ is the path the compiler was given: absolute in CMake's builds, relative to the build
// folder when a compiler cache rewrites paths to share its objects between checkouts
// ("../src/core/error.cpp"). The part below the source tree is what identifies a check on any
// machine.
std::string source_relative(const char* file) {
#ifdef DPL_SOURCE_DIR
  constexpr const char* root = DPL_SOURCE_DIR "/";
  const std::size_t n = std::strlen(root);
  if (std::strncmp(file, root, n) == 0) return file + n;
#endif
  while (std::strncmp(file, "../", 3) == 0 || std::strncmp(file, "./", 2) == 0) file += file[1] == '.' ? 3 : 2;
  return file;
}
}  // namespace

void throw_error(const char* file, int line, const std::string& message) {
  // The message stands alone: users read it, so it carries no source location of ours; the
  // location goes to where().
  throw Error(message, source_relative(file) + ":" + std::to_string(line));
}

}  // namespace dpl::detail
