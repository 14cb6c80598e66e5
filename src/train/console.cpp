#include "dpl/train/console.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "dpl/core/settings.hpp"

namespace dpl::train {

namespace {

// What the parent process's descriptor fd points at ("/dev/pts/3", "pipe:[...]", a file), or
// empty when that cannot be read.
std::string parent_descriptor(int fd) {
  char link[4096];
  const std::string path = "/proc/" + std::to_string(getppid()) + "/fd/" + std::to_string(fd);
  const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
}

bool names_terminal(const std::string& target) {
  return target.rfind("/dev/pts/", 0) == 0 || target.rfind("/dev/tty", 0) == 0 || target == "/dev/console";
}

}  // namespace

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
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  // Open MPI gives each local rank a pseudo-terminal of its own even when mpiexec's output goes
  // to a file or a pipe, and mpiexec is the rank's parent: a person watches only when the
  // parent's descriptor is a terminal too. (A shell started from a terminal passes the test; a
  // parent whose descriptors cannot be read leaves our own isatty as the answer.)
  const std::string parent = parent_descriptor(fd);
  return parent.empty() || names_terminal(parent);
}

OutputMode resolve_mode(OutputMode mode, const std::ostream& out) {
  if (mode != OutputMode::kAuto) return mode;
  // DPL_OUTPUT=plain (or terminal) overrides what is_terminal concludes.
  switch (settings().output) {
    case OutputSetting::kPlain: return OutputMode::kPlain;
    case OutputSetting::kTerminal: return OutputMode::kTerminal;
    case OutputSetting::kAuto: break;
  }
  return is_terminal(out) ? OutputMode::kTerminal : OutputMode::kPlain;
}

}  // namespace dpl::train
