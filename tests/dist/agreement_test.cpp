// The rank-agreement helper: which ranks differ from rank 0, and the one error every rank throws.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/comm.hpp"
#include "dpl/profile.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {

// Odd ranks replace the second of three lines.
std::string description_of(int rank) {
  return std::string("alpha (3)\n") + (rank % 2 ? "beta (5)\n" : "beta (4)\n") + "gamma (1)\n";
}

std::vector<int> odd_ranks(int size) {
  std::vector<int> out;
  for (int r = 1; r < size; r += 2) out.push_back(r);
  return out;
}

TEST(Agreement, EqualDescriptionsAgree) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    EXPECT_TRUE(comm::ranks_differing_from_rank0(comm, description_of(0)).empty()) << name;
    EXPECT_NO_THROW(comm::check_ranks_agree(comm, description_of(0), {"op", "the things", "thing", "fix it"}));
    const auto hashes = comm::gather_description_hashes(comm, "same text");
    ASSERT_EQ(hashes.size(), static_cast<std::size_t>(comm.size()));
    for (std::uint64_t h : hashes) EXPECT_EQ(h, hashes[0]) << name;
  }
}

TEST(Agreement, EveryRankLearnsWhichRanksDiffer) {
  auto& comm = communicator("hierarchical");
  EXPECT_EQ(comm::ranks_differing_from_rank0(comm, description_of(comm.rank())), odd_ranks(comm.size()));
  // The hash depends only on the text: the ranks with rank 0's text report rank 0's hash.
  const auto hashes = comm::gather_description_hashes(comm, description_of(comm.rank()));
  for (int r = 0; r < comm.size(); r += 2) EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0]);
}

TEST(Agreement, EveryRankThrowsTheSameErrorNamingTheRanksAndTheirFirstDifference) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const std::string what = error_message([&] {
    comm::check_ranks_agree(comm, description_of(comm.rank()),
                            {"Widget.setup", "the widgets", "part", "every rank must build the same widget"});
  });
  EXPECT_NE(what.find("Widget.setup (naive): the widgets differ between ranks (rank(s) 1"), std::string::npos)
      << what;
  EXPECT_NE(what.find("every rank must build the same widget"), std::string::npos) << what;
  EXPECT_NE(what.find("Rank 1: expected part 'beta (4)' as on rank 0, got 'beta (5)' (3 parts here, 3 on rank 0)"),
            std::string::npos)
      << what;
  if (comm.size() > 3) {
    EXPECT_NE(what.find("Rank 3: expected part 'beta (4)'"), std::string::npos) << what;
  }
  // The same message everywhere: no rank differs from rank 0 in what it threw.
  EXPECT_TRUE(comm::ranks_differing_from_rank0(comm, what).empty()) << what;
}

TEST(Agreement, AMissingLineIsNamed) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const std::string text = comm.rank() == comm.size() - 1 ? "a\nb\n" : "a\nb\nc\n";
  const std::string what = error_message([&] { comm::check_ranks_agree(comm, text, {"op", "the lists", "item", "fix it"}); });
  const std::string last = std::to_string(comm.size() - 1);
  EXPECT_NE(what.find("Rank " + last + ": expected item 'c' as on rank 0, got '(none)' (2 items here, 3 on rank 0)"),
            std::string::npos)
      << what;
}

TEST(Agreement, SummariesOfDifferentPhasesAreRefusedOnEveryRank) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  profile::PhaseTimer timer;
  timer.record("compute", 0.0, 0.001, 0);
  timer.record(comm.rank() == 1 ? "optimise" : "optimize", 0.001, 0.001, 0);
  const std::string what = error_message([&] { profile::summarize(timer, &comm, 0); });
  EXPECT_NE(what.find("profile::summarize (naive): the recorded phases differ between ranks (rank(s) 1 differ"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("expected phase 'optimize' as on rank 0, got 'optimise'"), std::string::npos) << what;
}

// Settings agreed at the start of a run: equal settings pass at the price of one allgather; a
// difference is one error, the same on every rank, naming the setting and each rank's value.
TEST(Agreement, EqualSettingsAgree) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    EXPECT_NO_THROW(comm::check_settings_agree(comm, {{"batch size", "100"}, {"epochs", "3"}}, "train"));
    EXPECT_NO_THROW(comm::check_settings_agree(comm, {}, "train"));
  }
}

TEST(Agreement, DifferingSettingsNameTheSettingAndEveryRanksValue) {
  auto& comm = communicator("hierarchical");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int last = comm.size() - 1;
  const std::string batch = comm.rank() == last ? "50" : "100";
  const std::string what = error_message([&] {
    comm::check_settings_agree(comm, {{"batch size (-b)", batch}, {"epochs (-e)", "3"}, {"dtype", "bf16"}},
                               "train_mnist");
  });
  const std::string others = comm.size() == 2 ? "rank 0 has 100" : "ranks 0, 1";
  EXPECT_NE(what.find("train_mnist (hierarchical): setting 'batch size (-b)' differs between ranks: " + others),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("rank " + std::to_string(last) + " has 50; every rank must run with the same settings"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find("epochs"), std::string::npos) << what;  // only what differs
  EXPECT_TRUE(comm::ranks_differing_from_rank0(comm, what).empty()) << what;
}

TEST(Agreement, EverySettingThatDiffersIsNamed) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const bool odd = comm.rank() % 2 == 1;
  const std::string what = error_message([&] {
    comm::check_settings_agree(comm, {{"epochs (-e)", odd ? "2" : "1"}, {"communicator", odd ? "naive" : "flat"}}, "run");
  });
  EXPECT_NE(what.find("setting 'epochs (-e)' differs between ranks: rank"), std::string::npos) << what;
  EXPECT_NE(what.find("; setting 'communicator' differs between ranks: "), std::string::npos) << what;
  EXPECT_NE(what.find(comm.size() >= 4 ? "ranks 1, 3 have naive" : "rank 1 has naive"), std::string::npos) << what;
}

}  // namespace
}  // namespace dpl::test
