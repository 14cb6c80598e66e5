#pragma once
// Printed output split into lines, for tests of what reports print.

#include <sstream>
#include <string>
#include <vector>

namespace dpl::test {

/// The lines of s, without their newlines (a last line without one counts too).
inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace dpl::test
