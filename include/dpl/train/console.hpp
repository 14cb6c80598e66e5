#pragma once
// Whether report output goes to an interactive terminal.

#include <ostream>

namespace dpl::train {

/// How reports draw: kTerminal rewrites lines in place with ANSI escapes, kPlain appends lines
/// (log files, pipes), kAuto picks kTerminal exactly when is_terminal(out).
enum class OutputMode { kAuto, kTerminal, kPlain };

/// True when out is std::cout (or std::cerr / std::clog) and that stream's file descriptor is a
/// terminal, and TERM is not "dumb". Any other stream (files, string streams) is not a terminal.
bool is_terminal(const std::ostream& out);

/// kTerminal or kPlain: mode itself unless it is kAuto, which is resolved by the environment
/// variable DPL_OUTPUT ("plain" or "terminal") when set, else with is_terminal(out). Under
/// Open MPI every rank's output is a pseudo-terminal, so redirect with DPL_OUTPUT=plain.
OutputMode resolve_mode(OutputMode mode, const std::ostream& out);

}  // namespace dpl::train
