// Settings: every DPL_* variable parsed in one place, strictly, and listed in docs/configuration.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "dpl/core/settings.hpp"
#include "support/expect_error.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The environment a test gives parse_settings: a plain function pointer needs a global.
std::map<std::string, std::string> g_env;
const char* fake_lookup(const char* name) {
  const auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
Settings parse(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return parse_settings(&fake_lookup);
}

TEST(Settings, DefaultsWhenUnsetOrEmpty) {
  for (const auto& env : {std::map<std::string, std::string>{},
                          std::map<std::string, std::string>{{"DPL_CUDA_TF32", ""}, {"DPL_RANKS_PER_NODE", ""}}}) {
    const Settings s = parse(env);
    EXPECT_TRUE(s.ranks_per_node.empty());
    EXPECT_FALSE(s.num_threads.has_value());
    EXPECT_FALSE(s.omp_num_threads_set);
    EXPECT_TRUE(s.cpu_caching);
    EXPECT_TRUE(s.cuda_caching);
    EXPECT_FALSE(s.cuda_tf32);
    EXPECT_TRUE(s.cudnn_benchmark);
    EXPECT_EQ(s.cudnn_candidates, 12);
    EXPECT_EQ(s.cudnn_workspace_slack, 3);
    EXPECT_TRUE(s.cutlass);
    EXPECT_TRUE(s.cuda_devices.empty());
    EXPECT_FALSE(s.mpi_cuda_aware.has_value());
    EXPECT_EQ(s.output, OutputSetting::kAuto);
    EXPECT_EQ(s.staging_chunk_bytes, 4 << 20);
    EXPECT_EQ(s.staging_slots, 4);
    EXPECT_EQ(s.collective_timeout, 600);
    EXPECT_EQ(s.attention, AttentionSetting::kAuto);
  }
}

TEST(Settings, ParsesEveryVariable) {
  const Settings s = parse({{"DPL_RANKS_PER_NODE", "2"},
                            {"DPL_NUM_THREADS", "7"},
                            {"OMP_NUM_THREADS", "3"},
                            {"DPL_CPU_NO_CACHING", "1"},
                            {"DPL_CUDA_NO_CACHING", "1"},
                            {"DPL_CUDA_TF32", "1"},
                            {"DPL_CUDNN_BENCHMARK", "0"},
                            {"DPL_CUDNN_CANDIDATES", "30"},
                            {"DPL_CUDNN_WORKSPACE_SLACK", "0"},
                            {"DPL_CUTLASS", "0"},
                            {"DPL_CUDA_DEVICE", "0,2,10"},
                            {"DPL_MPI_CUDA_AWARE", "0"},
                            {"DPL_OUTPUT", "plain"},
                            {"DPL_STAGING_CHUNK_BYTES", "65536"},
                            {"DPL_STAGING_SLOTS", "3"},
                            {"DPL_COLLECTIVE_TIMEOUT", "5"},
                            {"DPL_WINDOW_STORES", "streaming"},
                            {"DPL_ATTENTION", "plain"}});
  EXPECT_THAT(s.ranks_per_node, ElementsAre(2));
  EXPECT_EQ(s.num_threads, 7);
  EXPECT_TRUE(s.omp_num_threads_set);
  EXPECT_FALSE(s.cpu_caching);
  EXPECT_FALSE(s.cuda_caching);
  EXPECT_TRUE(s.cuda_tf32);
  EXPECT_FALSE(s.cudnn_benchmark);
  EXPECT_EQ(s.cudnn_candidates, 30);
  EXPECT_EQ(s.cudnn_workspace_slack, 0);
  EXPECT_FALSE(s.cutlass);
  EXPECT_THAT(s.cuda_devices, ElementsAre(0, 2, 10));
  EXPECT_EQ(s.mpi_cuda_aware, false);
  EXPECT_EQ(s.output, OutputSetting::kPlain);
  EXPECT_EQ(s.staging_chunk_bytes, 65536);
  EXPECT_EQ(s.staging_slots, 3);
  EXPECT_EQ(s.collective_timeout, 5);
  EXPECT_EQ(parse({{"DPL_COLLECTIVE_TIMEOUT", "0"}}).collective_timeout, 0);  // no watchdog
  EXPECT_EQ(parse({{"DPL_OUTPUT", "terminal"}}).output, OutputSetting::kTerminal);
  EXPECT_EQ(s.window_stores, WindowStoresSetting::kStreaming);
  EXPECT_EQ(parse({{"DPL_WINDOW_STORES", "cached"}}).window_stores, WindowStoresSetting::kCached);
  EXPECT_EQ(parse({}).window_stores, WindowStoresSetting::kMeasured);
  EXPECT_EQ(parse({{"DPL_MPI_CUDA_AWARE", "1"}}).mpi_cuda_aware, true);
  EXPECT_EQ(s.attention, AttentionSetting::kPlain);
  EXPECT_EQ(parse({{"DPL_ATTENTION", "auto"}}).attention, AttentionSetting::kAuto);
}

// Uneven virtual nodes: a list of node sizes in rank order, kept as written (the job's size is
// only known to the communicator, which checks the sum).
TEST(Settings, RanksPerNodeTakesOneSizeOrAListOfNodeSizes) {
  EXPECT_THAT(parse({{"DPL_RANKS_PER_NODE", "3"}}).ranks_per_node, ElementsAre(3));
  EXPECT_THAT(parse({{"DPL_RANKS_PER_NODE", "2,1"}}).ranks_per_node, ElementsAre(2, 1));
  EXPECT_THAT(parse({{"DPL_RANKS_PER_NODE", "1,3,2"}}).ranks_per_node, ElementsAre(1, 3, 2));
}

TEST(Settings, HostThreadsAreTakenUpToTheirLimit) {
  EXPECT_EQ(parse({{"DPL_NUM_THREADS", "1"}}).num_threads, 1);
  EXPECT_EQ(parse({{"DPL_NUM_THREADS", "1024"}}).num_threads, kMaxNumThreads);
  DPL_EXPECT_ERROR(parse({{"DPL_NUM_THREADS", "100000"}}),
                   HasSubstr("environment variable DPL_NUM_THREADS: expected a whole number of host threads per "
                             "process from 1 to 1024, got '100000'"));
}

TEST(Settings, RejectsMalformedValuesNamingVariableValueAndWhatIsAccepted) {
  const struct {
    const char* name;
    const char* value;
    const char* accepted;
  } cases[] = {
      {"DPL_RANKS_PER_NODE", "0", "from 1"},       {"DPL_RANKS_PER_NODE", "two", "whole number"},
      {"DPL_RANKS_PER_NODE", "2x", "whole number"}, {"DPL_RANKS_PER_NODE", "2,", "comma-separated list of node sizes"},
      {"DPL_RANKS_PER_NODE", ",1", "node sizes"},  {"DPL_RANKS_PER_NODE", "2,0", "from 1"},
      {"DPL_RANKS_PER_NODE", "2;1", "\"2,1\""},    {"DPL_RANKS_PER_NODE", "2,+1", "whole number"},
      {"DPL_NUM_THREADS", "-4", "whole number"},
      {"DPL_NUM_THREADS", "99999999999999999999", "whole number"},
      {"DPL_NUM_THREADS", "100000", "from 1 to 1024"},
      {"DPL_NUM_THREADS", "1025", "from 1 to 1024"},
      {"DPL_CUDA_TF32", "yes", "0 or 1"},          {"DPL_CUDA_NO_CACHING", "2", "0 or 1"},
      {"DPL_CUDNN_BENCHMARK", "on", "0 or 1"},
      {"DPL_CUDNN_CANDIDATES", "0", "from 1"},     {"DPL_CUDNN_WORKSPACE_SLACK", "101", "from 0"},
      {"DPL_CUDNN_WORKSPACE_SLACK", "2.5", "percent"},
      {"DPL_CPU_NO_CACHING", "true", "0 or 1"},    {"DPL_MPI_CUDA_AWARE", " 1", "0 or 1"},
      {"DPL_CUDA_DEVICE", "0,,1", "comma-separated"}, {"DPL_CUDA_DEVICE", "-1", "device number"},
      {"DPL_CUDA_DEVICE", "gpu0", "device number"},   {"DPL_OUTPUT", "fancy", "plain or terminal"},
      {"DPL_STAGING_SLOTS", "1", "from 2"},           {"DPL_STAGING_CHUNK_BYTES", "4M", "whole number"},
      {"DPL_COLLECTIVE_TIMEOUT", "-1", "whole number of seconds"},
      {"DPL_COLLECTIVE_TIMEOUT", "2.5", "whole number of seconds"},
      {"DPL_COLLECTIVE_TIMEOUT", "99999999", "31536000"},
      {"DPL_WINDOW_STORES", "fast", "measured, cached or streaming"},
      {"DPL_ATTENTION", "cudnn", "auto or plain"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + "=" + c.value);
    DPL_EXPECT_ERROR(parse({{c.name, c.value}}),
                     AllOf(HasSubstr(c.name), HasSubstr(std::string("'") + c.value + "'"), HasSubstr(c.accepted)));
  }
}

TEST(Settings, TableMatchesTheDocs) {
  std::ifstream in(source_path("docs/configuration.md"));
  ASSERT_TRUE(in) << "cannot read docs/configuration.md";
  std::map<std::string, std::string> documented;  // name -> "default | meaning"
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `DPL_", 0) != 0) continue;
    const std::size_t end_name = line.find('`', 3);
    const std::string name = line.substr(3, end_name - 3);
    std::string rest = line.substr(end_name + 4);  // after "` | "
    rest = rest.substr(0, rest.size() - 2);         // drop the closing " |"
    documented[name] = rest;
  }
  std::map<std::string, std::string> table;
  for (const SettingInfo& info : settings_table())
    table[info.name] = std::string(info.default_value) + " | " + info.meaning;
  EXPECT_EQ(documented, table);
  // Every variable the parser reads is in the table: setting each to a malformed value must fail.
  for (const SettingInfo& info : settings_table()) {
    SCOPED_TRACE(info.name);
    DPL_EXPECT_ERROR(parse({{info.name, "\x01"}}), HasSubstr(info.name));
  }
}

}  // namespace
}  // namespace dpl
