#pragma once
// Paths into the source tree for tests that read its files (docs, sources). The build passes the
// tree's root as DPL_SOURCE_DIR.

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace dpl {

/// The absolute path of `relative` (a path from the repository root).
inline std::string source_path(const std::string& relative) { return std::string(DPL_SOURCE_DIR) + "/" + relative; }

/// The regular files under `folder` (a path from the repository root; none when it does not
/// exist) whose extension is one of `extensions` (".cpp", ...), as paths from the repository root
/// ("src/core/error.cpp"), sorted.
inline std::vector<std::string> source_files_under(const std::string& folder, const std::vector<std::string>& extensions) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  const fs::path root(source_path(""));
  const fs::path dir(source_path(folder));
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (std::find(extensions.begin(), extensions.end(), ext) != extensions.end())
      out.push_back(fs::relative(e.path(), root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace dpl
