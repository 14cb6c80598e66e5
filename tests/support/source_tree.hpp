#pragma once
// Paths into the source tree for tests that read its files (docs, sources). The build passes the
// tree's root as DPL_SOURCE_DIR.

#include <string>

namespace dpl {

/// The absolute path of `relative` (a path from the repository root).
inline std::string source_path(const std::string& relative) { return std::string(DPL_SOURCE_DIR) + "/" + relative; }

}  // namespace dpl
