// The include graph of src/ and include/ follows docs/architecture.md ("Layers"): every
// `#include "..."` of a dpl file is mapped to its layer, and an include of a layer that is not
// below the includer, of another layer's private header, or of a private backend header from
// above the backend fails, unless it is one of the documented crossings listed here (and there).
// A listed crossing that the code no longer makes fails too, so the list stays true.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/source_tree.hpp"

namespace dpl {
namespace {

// Each layer and the layers it builds on directly; a layer may include itself and everything it
// reaches through this table. "dpl" is the umbrella header dpl/dpl.hpp, which includes them all.
const std::map<std::string, std::vector<std::string>>& layer_uses() {
  static const std::map<std::string, std::vector<std::string>> uses = {
      {"core", {}},
      {"tensor", {"core"}},
      {"backend", {"tensor"}},
      {"autograd", {"backend"}},
      {"nn", {"autograd"}},
      {"models", {"nn"}},
      {"serialize", {"nn"}},
      {"optim", {"nn"}},
      {"comm", {"tensor"}},
      {"profile", {"comm"}},
      {"parallel", {"optim", "comm", "profile"}},
      {"data", {"comm", "backend"}},
      {"train", {"data", "parallel", "serialize", "models"}},
      {"dpl", {"train"}},
  };
  return uses;
}

// The backend's interface to the layers above it: the kernel table (and the dispatcher it
// includes). Every other header under src/backend is the backend's own.
const std::set<std::string> kBackendInterface = {"backend/kernels.hpp", "backend/dispatch.hpp"};

// The documented crossings (docs/architecture.md, "Crossings"): `from` is a file, or a folder
// ending in '/', as a path from the repository root; `to` is the include as written.
struct Crossing {
  std::string from;
  std::string to;
};
const std::vector<Crossing>& documented_crossings() {
  static const std::vector<Crossing> crossings = {
      {"src/core/cuda.cpp", "backend/cuda_api.hpp"},
      {"src/tensor/", "backend/kernels.hpp"},
      {"src/comm/nccl/", "backend/cuda/comm_interop.hpp"},
      {"src/parallel/bucket_worker.hpp", "backend/side_lane.hpp"},
      {"src/data/image/image_batch_source.cpp", "backend/side_stream_copy.hpp"},
  };
  return crossings;
}

std::set<std::string> reachable_from(const std::string& layer) {
  std::set<std::string> seen;
  std::vector<std::string> pending = {layer};
  while (!pending.empty()) {
    const std::string l = pending.back();
    pending.pop_back();
    if (!seen.insert(l).second) continue;
    const auto it = layer_uses().find(l);
    if (it != layer_uses().end()) pending.insert(pending.end(), it->second.begin(), it->second.end());
  }
  return seen;
}

std::string first_folder(const std::string& path) { return path.substr(0, path.find('/')); }

// The layer of a file of the tree (a path from the root, under src/ or include/dpl/): the folder
// under src/ or include/dpl/ ("comm" for src/comm/nccl/ and include/dpl/comm/), or an umbrella
// header's name ("comm" for include/dpl/comm.hpp).
std::string layer_of_file(const std::string& file) {
  std::string rest = file.rfind("include/dpl/", 0) == 0 ? file.substr(12) : file.substr(4);
  if (rest.find('/') == std::string::npos) return rest.substr(0, rest.rfind('.'));  // an umbrella header
  return first_folder(rest);
}

// What an include names: the layer, and whether it is a private (src/) header. Null for a header
// that is not dpl's (a quoted third-party include).
struct Target {
  std::string layer;
  bool is_private = false;
};
std::optional<Target> target_of(const std::string& include) {
  if (include == "dpl/config.hpp") return Target{"core", false};  // the build's configuration
  if (include.rfind("dpl/", 0) == 0) {
    const std::string rest = include.substr(4);
    if (rest.find('/') == std::string::npos) return Target{rest.substr(0, rest.rfind('.')), false};
    return Target{first_folder(rest), false};
  }
  const std::string folder = first_folder(include);
  if (include.find('/') != std::string::npos && layer_uses().count(folder) != 0) return Target{folder, true};
  return std::nullopt;
}

bool listed(const Crossing& c, const std::string& file, const std::string& include) {
  const bool from = c.from.back() == '/' ? file.rfind(c.from, 0) == 0 : file == c.from;
  return from && include == c.to;
}

std::string joined(const std::set<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Why `include` in `file` breaks the layering, or an empty string when it does not (crossings
// are not consulted here).
std::string violation(const std::string& file, const std::string& include) {
  const std::string from = layer_of_file(file);
  if (layer_uses().count(from) == 0)
    return "is in a folder no layer owns (" + from + "): add it to docs/architecture.md and this test";
  const std::optional<Target> to = target_of(include);
  if (!to) return "";
  if (layer_uses().count(to->layer) == 0) return "names a header of no layer (" + to->layer + ")";
  if (file.rfind("include/", 0) == 0 && to->is_private)
    return "is a public header of layer " + from + " including the private header " + include;
  if (to->layer == from) return "";
  const std::set<std::string> below = reachable_from(from);
  if (below.count(to->layer) == 0)
    return "layer " + from + " includes layer " + to->layer + ", which is not below it (" + from +
           " builds on: " + joined(below) + ")";
  if (to->is_private && to->layer == "backend" && kBackendInterface.count(include) == 0)
    return "layer " + from + " includes the private backend header " + include +
           " (the backend's interface above it is backend/kernels.hpp)";
  if (to->is_private && to->layer != "backend" && to->layer != "core")
    return "layer " + from + " includes a private header of layer " + to->layer;
  return "";
}

struct Include {
  std::string file;
  int line = 0;
  std::string text;
};

std::vector<Include> includes_of_tree() {
  static const std::regex quoted(R"(^\s*#\s*include\s*"([^"]+)\")");
  std::vector<Include> out;
  for (const char* root : {"src", "include/dpl"})
    for (const std::string& file : source_files_under(root, {".hpp", ".cpp", ".cu", ".cuh", ".h"})) {
      std::ifstream in(source_path(file));
      int n = 0;
      std::smatch m;
      for (std::string line; std::getline(in, line);) {
        ++n;
        if (line.find("include") != std::string::npos && std::regex_search(line, m, quoted))
          out.push_back({file, n, m[1].str()});
      }
    }
  return out;
}

TEST(Layering, EveryIncludeFollowsTheLayersOrIsADocumentedCrossing) {
  const std::vector<Include> includes = includes_of_tree();
  ASSERT_GT(includes.size(), 500u) << "the scan found almost no includes; is DPL_SOURCE_DIR right?";
  std::string report;
  std::vector<bool> used(documented_crossings().size(), false);
  for (const Include& inc : includes) {
    const std::string why = violation(inc.file, inc.text);
    if (why.empty()) continue;
    bool allowed = false;
    for (std::size_t i = 0; i < documented_crossings().size(); ++i)
      if (listed(documented_crossings()[i], inc.file, inc.text)) allowed = used[i] = true;
    if (!allowed) report += "  " + inc.file + ":" + std::to_string(inc.line) + ": #include \"" + inc.text + "\": " + why + "\n";
  }
  EXPECT_TRUE(report.empty()) << "includes against the layering of docs/architecture.md (remove them, or document "
                                 "the crossing there and in this test):\n"
                              << report;
  for (std::size_t i = 0; i < used.size(); ++i)
    EXPECT_TRUE(used[i]) << "the documented crossing " << documented_crossings()[i].from << " -> "
                         << documented_crossings()[i].to
                         << " no longer occurs in the code: remove it from this test and docs/architecture.md";
}

TEST(Layering, EveryDocumentedCrossingIsInArchitectureMd) {
  std::ifstream in(source_path("docs/architecture.md"));
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(doc.empty());
  for (const Crossing& c : documented_crossings()) {
    EXPECT_NE(doc.find(c.from), std::string::npos) << "docs/architecture.md does not name " << c.from;
    EXPECT_NE(doc.find(c.to), std::string::npos) << "docs/architecture.md does not name " << c.to;
  }
}

TEST(Layering, PublicHeadersIncludeNoBackendLibrary) {
  static const std::regex library(R"(^\s*#\s*include\s*<(mpi|nccl|cuda|cublas|cudnn|Eigen|dnnl|omp)[^>]*>)");
  std::string report;
  for (const std::string& file : source_files_under("include/dpl", {".hpp", ".h"})) {
    std::ifstream in(source_path(file));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (std::regex_search(line, library)) report += "  " + file + ":" + std::to_string(n) + ": " + line + "\n";
    }
  }
  EXPECT_TRUE(report.empty()) << "public headers must compile without MPI, NCCL, CUDA, Eigen or oneDNN:\n" << report;
}

// The check itself: what it must refuse, and what it must let through (file, include).
TEST(Layering, CheckRefusesUpwardAndPrivateIncludes) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"src/comm/staging_communicator.cpp", "dpl/profile/phase_timer.hpp"},  // up
      {"src/core/device.cpp", "dpl/tensor/tensor.hpp"},                      // up
      {"src/nn/conv.cpp", "dpl/optim/optimizer.hpp"},                        // up
      {"src/train/trainer.cpp", "backend/cuda/cuda_device.hpp"},             // a private backend header
      {"src/train/trainer.cpp", "parallel/bucket_worker.hpp"},               // another layer's private header
      {"include/dpl/nn/module.hpp", "nn/private_helper.hpp"},                // private from public
      {"src/newlayer/x.cpp", "dpl/core/error.hpp"},                          // a folder of no layer
  };
  for (const auto& [file, include] : refused) EXPECT_NE(violation(file, include), "") << file << " -> " << include;
  const std::string why = violation("src/comm/x.cpp", "dpl/profile/phase_timer.hpp");
  EXPECT_NE(why.find("layer comm includes layer profile"), std::string::npos) << why;

  const std::vector<std::pair<std::string, std::string>> allowed = {
      {"src/autograd/ops.cpp", "backend/kernels.hpp"},          {"src/comm/x.cpp", "dpl/core/clock.hpp"},
      {"src/backend/cpu/cast.cpp", "core/half.hpp"},            {"src/backend/cuda/copy.cu", "backend/cuda/cuda_device.hpp"},
      {"include/dpl/dpl.hpp", "dpl/train.hpp"},                 {"src/train/trainer.cpp", "nlohmann/json.hpp"},
  };
  for (const auto& [file, include] : allowed) EXPECT_EQ(violation(file, include), "") << file << " -> " << include;
}

}  // namespace
}  // namespace dpl
