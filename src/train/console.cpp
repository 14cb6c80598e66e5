#include "dpl/train/console.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "dpl/core/settings.hpp"

namespace dpl::train {

bool is_terminal(const std::ostream& out) {
  int fd = -1;
  if (&out == &std::cout) {
    fd = STDOUT_FILENO;
  } else if (&out == &std::cerr || &out == &std::clog) {
    fd = STDERR_FILENO;
  }
  if (fd < 0 || isatty(fd) == 0) return false;
  // A dumb terminal shows escape sequences as garbage.
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

OutputMode resolve_mode(OutputMode mode, const std::ostream& out) {
  if (mode != OutputMode::kAuto) return mode;
  // Open MPI gives each rank a pseudo-terminal even when mpiexec's own output goes to a file, so
  // isatty cannot tell; DPL_OUTPUT=plain (or terminal) settles it.
  switch (settings().output) {
    case OutputSetting::kPlain: return OutputMode::kPlain;
    case OutputSetting::kTerminal: return OutputMode::kTerminal;
    case OutputSetting::kAuto: break;
  }
  return is_terminal(out) ? OutputMode::kTerminal : OutputMode::kPlain;
}

}  // namespace dpl::train
