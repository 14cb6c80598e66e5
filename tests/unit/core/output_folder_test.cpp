// Output folders and result files: checked before training, every write checked with the
// system's reason, nothing half-written and no temporary file left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace dpl {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(OutputFolder, IsCreatedAndProbedWithoutLeavingFiles) {
  test::TempDir dir("dpl-output-folder");
  const fs::path out = fs::path(dir.path()) / "runs" / "first";
  train::prepare_output_folder(out.string());
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_THAT(files_in(out), IsEmpty());
  train::prepare_output_folder(out.string());  // an existing folder is fine
}

TEST(OutputFolder, AFileInTheWayIsRefusedWithTheReason) {
  test::TempDir dir("dpl-output-folder");
  const fs::path file = fs::path(dir.path()) / "log";
  std::ofstream(file) << "x";
  DPL_EXPECT_ERROR(train::prepare_output_folder(file.string()),
                   AllOf(HasSubstr(file.string()), HasSubstr("exists and is not a folder")));
  DPL_EXPECT_ERROR(train::prepare_output_folder((file / "result").string()),
                   AllOf(HasSubstr("cannot create the output folder"), HasSubstr("Not a directory")));
  DPL_EXPECT_ERROR(train::prepare_output_folder(""), HasSubstr("expected an output folder, got an empty path"));
}

TEST(OutputFolder, AFailedWriteNamesTheFileAndLeavesNothingBehind) {
  test::TempDir dir("dpl-output-folder");
  const fs::path missing = fs::path(dir.path()) / "gone" / "log";
  DPL_EXPECT_ERROR(detail::write_file_atomically(missing.string(), "{}", "LogReport"),
                   AllOf(HasSubstr("LogReport"), HasSubstr(missing.string()), HasSubstr("No such file or directory")));
  EXPECT_THAT(files_in(dir.path()), IsEmpty());
}

TEST(OutputFolder, AnAtomicWriteReplacesTheFileWhole) {
  test::TempDir dir("dpl-output-folder");
  const fs::path target = fs::path(dir.path()) / "phase_summary.json";
  detail::write_file_atomically(target.string(), "old", "PhaseSummary");
  {
    detail::AtomicFile file(target.string(), "PhaseSummary");
    file.write("new but never committed");
  }  // abandoned: the target keeps its old content and the temporary is gone
  EXPECT_THAT(files_in(dir.path()), ElementsAre("phase_summary.json"));
  std::ifstream in(target);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "old");
  detail::write_file_atomically(target.string(), "new", "PhaseSummary");
  std::ifstream again(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), "new");
}

}  // namespace
}  // namespace dpl
