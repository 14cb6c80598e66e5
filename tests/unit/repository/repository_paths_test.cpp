// Docs and comments that name a file of this repository name one that exists: a stale path in a
// comment misleads as much as a failing test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/source_tree.hpp"

namespace dpl {
namespace {

namespace fs = std::filesystem;

// Where a path written without its first folder may start: `dpl/core/error.hpp` is an include
// path, `backend/kernels.hpp` one relative to src/, `support/gradcheck.hpp` to tests/.
const std::vector<std::string> kRoots = {"", "include/", "src/", "tests/"};

bool exists_in_tree(const std::string& path) {
  for (const auto& root : kRoots)
    if (fs::exists(source_path(root + path))) return true;
  return false;
}

// Path-like words: folders joined by '/' ending in a file name with a known extension, or a
// path from one of the tree's top folders (which may name a folder: "src/comm/mpi").
const std::regex& path_word() {
  static const std::regex re(
      R"((([A-Za-z0-9_.\-]+/)+[A-Za-z0-9_\-]+\.(hpp|cpp|cu|cuh|md|sh|py|cmake|txt|in|json)\b)|)"
      R"(\b((src|include|tests|docs|benchmarks|examples|scripts|cmake|tools)(/[A-Za-z0-9_\-]+)+))");
  return re;
}

// Text whose paths count: the whole of a Markdown file, the comments of a source file.
std::string checked_text(const fs::path& file) {
  std::ifstream in(file);
  std::string out;
  const bool markdown = file.extension() == ".md";
  const bool hash_comments = file.extension() == ".sh" || file.extension() == ".py" ||
                             file.filename() == "CMakeLists.txt" || file.extension() == ".cmake";
  for (std::string line; std::getline(in, line);) {
    if (markdown) {
      out += line + "\n";
      continue;
    }
    const std::size_t at = line.find(hash_comments ? "#" : "//");
    if (at != std::string::npos) out += line.substr(at) + "\n";
  }
  return out;
}

std::vector<fs::path> files_to_check() {
  std::vector<fs::path> files = {source_path("README.md")};
  for (const char* folder : {"docs", "include", "src", "tests", "benchmarks", "examples", "scripts", "cmake"}) {
    const fs::path dir = source_path(folder);
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext == ".md" || ext == ".hpp" || ext == ".cpp" || ext == ".cu" || ext == ".cuh" || ext == ".sh" ||
          ext == ".py" || ext == ".cmake" || e.path().filename() == "CMakeLists.txt")
        files.push_back(e.path());
    }
  }
  return files;
}

// Paths that name what a build or a run makes, or what lies outside the tree.
bool generated(const std::string& path) {
  // "../" names what lies beside the repository (the measurement scripts of a workplace), which a
  // clone does not have.
  for (const char* prefix : {"build", "_install", "/", "$", "~", "http", "usr/", "etc/", "opt/", "shared/", "../"})
    if (path.rfind(prefix, 0) == 0) return true;
  for (const char* name : {"dpl/config.hpp", "log.tmp", "phase_summary.json", "trace.json", "log.json"})
    if (path.find(name) != std::string::npos) return true;
  return false;
}

TEST(RepositoryPaths, EveryPathNamedInDocsAndCommentsExists) {
  std::set<std::string> missing;
  std::size_t checked = 0;
  for (const fs::path& file : files_to_check()) {
    const std::string text = checked_text(file);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), path_word()); it != std::sregex_iterator(); ++it) {
      const std::string path = it->str();
      // Skip what follows a placeholder or a shell variable ("$OUT/x.json", "<concern>/x.hpp").
      const std::size_t pos = static_cast<std::size_t>(it->position());
      if (pos > 0 && (text[pos - 1] == '$' || text[pos - 1] == '>' || text[pos - 1] == '*' || text[pos - 1] == '/'))
        continue;
      if (generated(path)) continue;
      ++checked;
      if (!exists_in_tree(path))
        missing.insert(fs::relative(file, source_path("")).string() + " names " + path);
    }
  }
  EXPECT_GT(checked, 20u) << "the scan found almost no paths; is DPL_SOURCE_DIR right?";
  std::string report;
  for (const auto& m : missing) report += "  " + m + "\n";
  EXPECT_TRUE(missing.empty()) << "paths named but not in the repository:\n" << report;
}

}  // namespace
}  // namespace dpl
