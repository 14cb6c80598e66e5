// main() of dpl_dist_tests: every rank runs every test; rank 0 prints GoogleTest's report, the
// other ranks print only their failures (prefixed with their rank), and the process of every rank
// exits non-zero when any rank failed, so mpiexec's exit status is the job's verdict.
//
// MPI is initialised here, not by the library: the tests thereby exercise the path of a program
// that owns MPI (the library must use it and leave MPI_Finalize to us). No communicator is made
// here; tests make theirs through dist_test_util.hpp.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

// The result printer of ranks other than 0: silent except for failures.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}

  // The test's name is kept here because UnitTest::current_test_info() would take the lock that
  // GoogleTest holds while it reports a part result.
  void OnTestStart(const ::testing::TestInfo& info) override {
    current_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { current_ = "(between tests)"; }

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    const std::string text = "[rank " + std::to_string(rank_) + "] FAILED " + current_ + " at " +
                             (r.file_name() ? r.file_name() : "?") + ":" + std::to_string(r.line_number()) + "\n" +
                             r.summary() + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

 private:
  int rank_;
  std::string current_ = "(before the first test)";
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  // MULTIPLE, as dpl asks when it initialises MPI: the collective watchdog's thread communicates.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  ::testing::InitGoogleTest(&argc, argv);
  // An unexpected exception must not be swallowed by one rank while the others wait for it in a
  // collective: let it reach the library's terminate handler, which aborts every rank with the
  // message. EXPECT_THROW still catches the exceptions a test expects.
  GTEST_FLAG_SET(catch_exceptions, false);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }

  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;

  std::vector<int> all(static_cast<std::size_t>(size), 0);
  MPI_Gather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any) {
    std::string ranks;
    for (int r = 0; r < size; ++r)
      if (all[static_cast<std::size_t>(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::printf("[dist] tests failed on rank(s) %s of %d\n", ranks.c_str(), size);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return any ? 1 : 0;
}
