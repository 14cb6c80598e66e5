// safetensors files (include/dpl/serialize/safetensors.hpp): round trips of every dtype, each
// corruption the reader must name, writes that fail without harming the previous file, and files
// exchanged with an independent reader and writer in Python (json + numpy) when one is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/file_bytes.hpp"
#include "support/source_tree.hpp"
#include "support/temp_dir.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using serialize::load_safetensors;
using serialize::save_safetensors;
using test::TempDir;
using test::Bytes;
using test::read_bytes;
using test::write_bytes;
using Named = std::vector<std::pair<std::string, Tensor>>;
namespace fs = std::filesystem;

Bytes bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const std::uint8_t*>(h.nbytes() ? h.raw_data() : nullptr);
  return Bytes(p, p + h.nbytes());
}

// A tensor of a 16-bit dtype from its bit patterns (there is no C++ type to fill it from).
Tensor from_bits(const std::vector<std::uint16_t>& bits, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memcpy(t.raw_data(), bits.data(), bits.size() * sizeof(std::uint16_t));
  return t;
}

// The same tensors as REFERENCE in safetensors_check.py, in the same order.
Named reference() {
  return {
      {"weight", Tensor::from_vector<float>({-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}, {2, 3})},
      {"half", from_bits({0x3800, 0xBD00, 0x6400}, {3}, kFloat16)},  // 0.5, -1.25, 1024
      {"brain", from_bits({0x3F80, 0xC020, 0x3E20, 0x4040}, {2, 2}, kBFloat16)},  // 1, -2.5, 0.15625, 3
      {"labels", Tensor::from_vector<std::int32_t>({0, -7, 2147483647, -2147483647 - 1}, {4})},
      {"index", Tensor::from_vector<std::int64_t>({-1, std::int64_t{1} << 40, 9007199254740993}, {3})},
      {"pixels", Tensor::from_vector<std::uint8_t>({0, 127, 128, 255}, {2, 2})},
      {"scalar", Tensor::from_vector<float>({3.25f}, {})},
      {"empty", Tensor::zeros({0, 4})},
  };
}
const std::map<std::string, std::string> kMetadata = {{"format", "dpl-test"}, {"epoch", "3"}};

void expect_same(const Named& got, const Named& want, bool same_order = true) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& [name, w] = want[i];
    const Tensor* g = nullptr;
    for (const auto& entry : got)
      if (entry.first == name) g = &entry.second;
    ASSERT_NE(g, nullptr) << name;
    if (same_order) {
      EXPECT_EQ(got[i].first, name);
    }
    EXPECT_EQ(g->dtype(), w.dtype()) << name;
    EXPECT_EQ(g->shape(), w.shape()) << name;
    EXPECT_EQ(g->device(), Device::cpu()) << name;
    EXPECT_TRUE(g->is_contiguous()) << name;
    EXPECT_EQ(bytes_of(*g), bytes_of(w)) << name;
  }
}


// A file made by hand: the 8-byte length of header (or `length` when given), header, data bytes.
Bytes hand_made(const std::string& header, std::size_t data_bytes, std::uint64_t length = ~std::uint64_t{0}) {
  const std::uint64_t n = length == ~std::uint64_t{0} ? header.size() : length;
  Bytes b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + data_bytes, 0x5a);
  return b;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// --- round trips ---------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeScalarsEmptyTensorsAndMetadata) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, reference(), kMetadata);
  const serialize::SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.path, path);
  expect_same(f.tensors, reference());
  EXPECT_EQ(f.metadata, kMetadata);
  EXPECT_TRUE(f.contains("brain"));
  EXPECT_FALSE(f.contains("nothing"));
  EXPECT_EQ(f.at("scalar").item(), 3.25f);
  DPL_EXPECT_ERROR(f.at("nothing"), AllOf(HasSubstr(path), HasSubstr("'nothing'")));
}

TEST(Safetensors, HeaderIsPaddedAndDataFollowsIt) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"a", Tensor::from_vector<float>({1.f, 2.f}, {2})}});
  const Bytes b = read_bytes(path);
  ASSERT_GE(b.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(b[static_cast<std::size_t>(i)]) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(b.size(), 8 + n + 8);
  const std::string header(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header.rfind("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0), 0u) << header;
  EXPECT_EQ(header.find_first_not_of(' ', header.find_last_of('}') + 1), std::string::npos) << header;
  float values[2];
  std::memcpy(values, b.data() + 8 + n, sizeof values);
  EXPECT_THAT(values, ElementsAre(1.f, 2.f));
}

TEST(Safetensors, WritesViewsAsContiguousRowMajorData) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("view.safetensors");
  const Tensor full = Tensor::arange(0, 12).reshape({3, 4});
  const Tensor columns = full.narrow(1, 1, 2);  // not contiguous
  save_safetensors(path, {{"cols", columns}});
  EXPECT_EQ(load_safetensors(path).at("cols").to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
}

TEST(Safetensors, ReplacesAnExistingFile) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"old", Tensor::ones({5})}});
  save_safetensors(path, {{"new", Tensor::zeros({2})}});
  const auto f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "new");
  EXPECT_THAT(files_in(dir.path()), ElementsAre("w.safetensors"));
}

// --- bad input to the writer -----------------------------------------------------------------------

TEST(Safetensors, RejectsBadNamesAndTensorsWithoutCreatingAFile) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("w.safetensors");
  const Tensor t = Tensor::ones({2});
  DPL_EXPECT_ERROR(save_safetensors(path, {{"a", t}, {"a", t}}), AllOf(HasSubstr(path), HasSubstr("'a' appears twice")));
  DPL_EXPECT_ERROR(save_safetensors(path, {{"", t}}), AllOf(HasSubstr(path), HasSubstr("empty name")));
  DPL_EXPECT_ERROR(save_safetensors(path, {{"__metadata__", t}}), HasSubstr("reserved"));
  DPL_EXPECT_ERROR(save_safetensors(path, {{"u", Tensor()}}), AllOf(HasSubstr(path), HasSubstr("'u' is undefined")));
  DPL_EXPECT_ERROR(save_safetensors("", {{"a", t}}), HasSubstr("empty"));
  EXPECT_TRUE(files_in(dir.path()).empty());
  const std::string nowhere = dir.file("no/such/folder/w.safetensors");
  DPL_EXPECT_ERROR(save_safetensors(nowhere, {{"a", t}}),
                   AllOf(HasSubstr("cannot create the temporary file"), HasSubstr(nowhere)));
}

// --- failed writes -------------------------------------------------------------------------------

// A full disk, simulated: in a child process whose file size limit is 64 KiB, writing 1 MiB must
// fail with EFBIG (SIGXFSZ ignored, as a program that handles errors does), throw dpl::Error,
// remove the temporary file, and leave the earlier file as it was.
TEST(Safetensors, FailedWriteLeavesThePreviousFileIntact) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, reference(), kMetadata);
  const Bytes before = read_bytes(path);
  const Tensor big = Tensor::ones({1 << 18});

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only async-signal-safe work and our own code from here; no gtest assertions in the child.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    int code = 11;  // no exception
    try {
      save_safetensors(path, {{"big", big}});
    } catch (const Error& e) {
      const std::string what = e.what();
      code = what.find(path) != std::string::npos && what.find(std::strerror(EFBIG)) != std::string::npos &&
                     what.find("unchanged") != std::string::npos
                 ? 0
                 : 12;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit normally (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: no error thrown, 12: unexpected message";
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_THAT(files_in(dir.path()), ElementsAre("w.safetensors")) << "the temporary file was left behind";
  expect_same(load_safetensors(path).tensors, reference());
}

// A rename that fails (the target is a folder) comes after the whole file was written: the
// temporary must still go, and the folder stay.
TEST(Safetensors, FailedRenameRemovesTheTemporaryFile) {
  TempDir dir("dpl_safetensors");
  const std::string target = dir.file("taken");
  fs::create_directories(fs::path(target) / "inside");
  DPL_EXPECT_ERROR(save_safetensors(target, {{"a", Tensor::ones({3})}}),
                   AllOf(HasSubstr("cannot move"), HasSubstr(target)));
  EXPECT_THAT(files_in(dir.path()), ElementsAre("taken"));
  EXPECT_TRUE(fs::is_directory(fs::path(target) / "inside"));
}

// --- corrupt files -------------------------------------------------------------------------------

struct Corruption {
  const char* what;
  Bytes file;
  std::vector<std::string> message;  // substrings the error must contain besides the path
};

std::vector<Corruption> corruptions() {
  const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  std::vector<Corruption> c;
  c.push_back({"truncated before the header length", Bytes{1, 2, 3, 4, 5}, {"truncated", "5 bytes long"}});
  c.push_back({"header length beyond the file", hand_made("{}", 20, 1000),
               {"header length at byte offset 0 is 1000", "only 22 bytes follow it"}});
  // 'x' is header byte 6, so byte offset 8 + 6 in the file.
  c.push_back({"malformed JSON", hand_made(R"({"a": x})", 0), {"malformed JSON header near byte offset 14"}});
  c.push_back({"JSON cut short", hand_made(R"({"a": {"dtype": "F32",)", 0), {"malformed JSON header"}});
  // Found by fuzzing: the parser's out_of_range error escaped as a foreign exception type.
  c.push_back({"a number beyond a double", hand_made(R"({"w":{"dtype":"F32","shape":[1e999]}})", 0),
               {"malformed JSON header: ", "number overflow parsing '1e999'"}});
  c.push_back({"header not an object", hand_made("[1, 2]", 0), {"expected the header", "JSON object", "array"}});
  c.push_back({"unknown dtype", hand_made(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
               {"tensor 'w'", "unknown dtype \"F64\""}});
  c.push_back({"missing field", hand_made(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
               {"tensor 'w'", "no \"data_offsets\""}});
  c.push_back({"negative extent", hand_made(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "non-negative integers in \"shape\""}});
  c.push_back({"offsets beyond the data", hand_made(R"({"w":)" + f32x2 + "[0,8]}}", 4),
               {"tensor 'w'", "[0, 8] reach past the end of the data section (4 bytes"}});
  c.push_back({"offsets reversed", hand_made(R"({"w":)" + f32x2 + "[8,0]}}", 8), {"tensor 'w'", "reversed"}});
  c.push_back({"offsets not matching shape x dtype",
               hand_made(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               {"tensor 'w'", "hold 8 bytes, but shape [3] of F32 needs 12"}});
  c.push_back({"overlapping tensors",
               hand_made(R"({"a":)" + f32x2 + R"([0,8]},"b":)" + f32x2 + "[4,12]}}", 12),
               {"'a'", "'b'", "overlap"}});
  c.push_back({"a gap between tensors",
               hand_made(R"({"a":)" + f32x2 + R"([0,8]},"b":)" + f32x2 + "[12,20]}}", 20),
               {"bytes 8 to 12 of the data section", "gap before tensor 'b'"}});
  const std::string one = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  c.push_back({"trailing garbage", hand_made(one, 7),
               {"3 trailing bytes after the last tensor, from byte offset " + std::to_string(8 + one.size() + 4)}});
  c.push_back({"metadata not strings", hand_made(R"({"__metadata__":{"epoch":3}})", 0), {"'epoch'", "3"}});
  // No bytes, but extents whose product overflowed the strides' arithmetic.
  c.push_back({"an empty tensor with huge extents",
               hand_made(R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", 0),
               {"tensor 'w'", "is too large: its non-zero extents must multiply to at most 2^63 - 1 bytes"}});
  c.push_back({"a name twice", hand_made(R"({"w":)" + f32x2 + R"([0,8]},"w":)" + f32x2 + "[0,8]}}", 8),
               {"names 'w' more than once"}});
  return c;
}

TEST(Safetensors, EveryCorruptionIsNamedWithTheFile) {
  TempDir dir("dpl_safetensors");
  for (const Corruption& c : corruptions()) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.file("bad.safetensors");
    write_bytes(path, c.file);
    const std::string message = test::error_message([&] { load_safetensors(path); });
    EXPECT_THAT(message, HasSubstr("load_safetensors: " + path + ": "));
    for (const std::string& part : c.message) EXPECT_THAT(message, HasSubstr(part));
  }
}

TEST(Safetensors, MissingFileAndFolderAreNamed) {
  TempDir dir("dpl_safetensors");
  const std::string missing = dir.file("missing.safetensors");
  DPL_EXPECT_ERROR(load_safetensors(missing), AllOf(HasSubstr(missing), HasSubstr("cannot open")));
  DPL_EXPECT_ERROR(load_safetensors(dir.path().string()), HasSubstr("not a regular file"));
}

TEST(Safetensors, ReadsEmptyTensorsAnywhereAndAFileWithoutTensors) {
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("h.safetensors");
  write_bytes(path, hand_made(R"({"e":{"dtype":"I64","shape":[2,0],"data_offsets":[4,4]},)"
                              R"("w":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})",
                              4));
  const auto f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "w");  // in data order
  EXPECT_EQ(f.at("e").shape(), (Shape{2, 0}));
  EXPECT_EQ(f.at("w").dtype(), kInt32);
  write_bytes(path, hand_made("{}      ", 0));
  EXPECT_TRUE(load_safetensors(path).tensors.empty());
}

// --- Python interop -------------------------------------------------------------------------------

// The first of python3 on the PATH and the system's own (where Debian's python3-numpy installs,
// which a python3 from a version manager earlier on the PATH does not see) that can import numpy;
// empty when neither can.
std::string python_with_numpy() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

int run_check_script(const std::string& python, const std::string& mode, const std::string& file) {
  const std::string cmd =
      python + " '" + source_path("tests/unit/serialize/safetensors_check.py") + "' " + mode + " '" + file + "'";
  return std::system(cmd.c_str());
}

TEST(SafetensorsInterop, PythonReadsWhatDplWrites) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "python3 with numpy is not installed";
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("from_dpl.safetensors");
  save_safetensors(path, reference(), kMetadata);
  EXPECT_EQ(run_check_script(python, "check", path), 0) << "the script printed what differs";
}

TEST(SafetensorsInterop, DplReadsWhatPythonWrites) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "python3 with numpy is not installed";
  TempDir dir("dpl_safetensors");
  const std::string path = dir.file("from_python.safetensors");
  ASSERT_EQ(run_check_script(python, "write", path), 0);
  const auto f = load_safetensors(path);
  expect_same(f.tensors, reference(), /*same_order=*/false);
  EXPECT_EQ(f.metadata, kMetadata);
  // The script lays the data out in reverse name order; the result follows the data.
  std::vector<std::string> names;
  for (const auto& entry : f.tensors) names.push_back(entry.first);
  EXPECT_THAT(names, ElementsAre("weight", "scalar", "pixels", "labels", "index", "half", "empty", "brain"));
}

}  // namespace
}  // namespace dpl
