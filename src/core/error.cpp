#include "dpl/core/error.hpp"

namespace dpl::detail {

void throw_error(const char* /*file*/, int /*line*/, const std::string& message) {
  // The message stands alone: users read it, so it carries no source location of ours.
  throw Error(message);
}

}  // namespace dpl::detail
