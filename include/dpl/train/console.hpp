#pragma once
// Whether report output goes to an interactive terminal.

#include <ostream>

namespace dpl::train {

/// How reports draw: kTerminal rewrites lines in place with ANSI escapes, kPlain appends lines
/// (log files, pipes), kAuto picks kTerminal exactly when is_terminal(out).
enum class OutputMode { kAuto, kTerminal, kPlain };

/// True when out is std::cout (or std::cerr / std::clog), that stream's file descriptor is a
/// terminal, TERM is not "dumb", and the parent process's same descriptor is a terminal too (or
/// cannot be read). The last condition is for mpiexec, which gives every local rank a
/// pseudo-terminal even when its own output goes to a file or pipe. Any other stream (files,
/// string streams) is not a terminal.
bool is_terminal(const std::ostream& out);

/// kTerminal or kPlain: mode itself unless it is kAuto, which is resolved by the environment
/// variable DPL_OUTPUT ("plain" or "terminal") when set, else with is_terminal(out).
OutputMode resolve_mode(OutputMode mode, const std::ostream& out);

}  // namespace dpl::train
