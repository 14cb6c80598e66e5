#pragma once
// Flag values checked in the user's terms, shared by the example programs: CLI11's own checks
// would clamp, wrap or word the error in its terms ("Value 0 not in range 0.000000 to
// 1.79769e+308"). A program parses every flag before any MPI or data work and exits with the
// message of the first BadFlag.

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

namespace dpl::examples {

/// A flag's value the program refuses, with the message to print.
struct BadFlag {
  std::string message;
};

/// A flag's whole number, exactly as typed, in [min, max]; throws BadFlag ("-b must be ≥ 1, got
/// 0", "-e must be a whole number, got 'ten'") otherwise.
inline std::uint64_t parse_whole(const std::string& flag, const std::string& text, std::uint64_t min,
                                 std::uint64_t max) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  const bool negative = text.size() > 1 && text[0] == '-' && text.find_first_not_of("0123456789", 1) == std::string::npos;
  if (negative) throw BadFlag{flag + " must be ≥ " + std::to_string(min) + ", got " + text};
  if (!digits) throw BadFlag{flag + " must be a whole number, got '" + text + "'"};
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v > max) throw BadFlag{flag + " must be ≤ " + std::to_string(max) + ", got " + text};
  if (v < min) throw BadFlag{flag + " must be ≥ " + std::to_string(min) + ", got " + text};
  return v;
}

/// A flag's real number, all of the text a finite decimal, in [min, max]; throws BadFlag ("--lr
/// must be ≥ 0, got -1", "--momentum must be a number, got 'x'") otherwise.
inline double parse_real(const std::string& flag, const std::string& text, double min, double max) {
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    throw BadFlag{flag + " must be a number, got '" + text + "'"};
  const auto shown = [](double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  };
  if (v < min) throw BadFlag{flag + " must be ≥ " + shown(min) + ", got " + text};
  if (v > max) throw BadFlag{flag + " must be ≤ " + shown(max) + ", got " + text};
  return v;
}

/// The ZeRO stage from --zero (0, 1 or 2) and --shard-optimizer-state (the same as --zero 1);
/// throws BadFlag for another stage, for both flags naming different stages, and for stage 1
/// with --overlap (stage 1 reduce-scatters after backward; stage 2 during it).
inline int parse_zero_stage(const std::string& zero, bool shard_state, bool overlap) {
  const int stage = static_cast<int>(parse_whole("--zero", zero, 0, 2));
  if (shard_state && stage == 2)
    throw BadFlag{"--shard-optimizer-state is --zero 1, but --zero 2 was given too; give one of them"};
  const int chosen = shard_state ? 1 : stage;
  if (chosen == 1 && overlap)
    throw BadFlag{"--zero 1 reduce-scatters after backward, so not with --overlap; --zero 2 reduce-scatters bucket by "
                  "bucket during backward"};
  return chosen;
}

/// A real number as text that tells any two different values apart (for the ranks' agreement on
/// the flags): 0.1 and 0.10 give the same text, 0.1 and 0.1000001 do not.
inline std::string exact_text(double v) {
  std::ostringstream s;
  s << std::setprecision(std::numeric_limits<double>::max_digits10) << v;
  return s.str();
}

}  // namespace dpl::examples
