// What the collective watchdog sees of a healthy run (src/comm/watchdog.hpp): every collective of a
// communicator create_communicator made takes the next sequence number, the same on every rank;
// point-to-point calls keep it; nothing is marked between calls. The expiry itself ends the job,
// so it is tested by dist_watchdog_probe under run_abort_probe.cmake.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "comm/watchdog.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm.hpp"

namespace dpl::test {
namespace {

TEST(Watchdog, EveryCollectiveTakesTheNextSequenceNumberOnEveryRank) {
  auto& comm = communicator("hierarchical");
  const std::uint64_t before = comm::detail::current_op().seq;
  Tensor buf = Tensor::ones({16});
  comm.allreduce(buf);
  comm.broadcast(buf, 0);
  comm.barrier();
  const comm::detail::WatchedOp op = comm::detail::current_op();
  EXPECT_EQ(op.seq, before + 3);
  EXPECT_EQ(op.start_ns, 0);  // not in a collective now
  EXPECT_EQ(std::string(op.op), "barrier");
  EXPECT_EQ(std::string(op.comm), "hierarchical");
  // The same number everywhere: the ranks compare it when a deadline expires.
  Tensor seq = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(op.seq)}, {1});
  Tensor all = Tensor::empty({comm.size()}, kInt64);
  comm.allgather(seq, all);
  for (const std::int64_t s : all.to_vector<std::int64_t>()) EXPECT_EQ(s, static_cast<std::int64_t>(op.seq));
}

TEST(Watchdog, PointToPointCallsKeepTheSequenceNumber) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  const std::uint64_t before = comm::detail::current_op().seq;
  Tensor buf = Tensor::ones({4});
  if (comm.rank() == 0) comm.send(buf, 1, 7);
  if (comm.rank() == 1) comm.recv(buf, 0, 7);
  const comm::detail::WatchedOp op = comm::detail::current_op();
  EXPECT_EQ(op.seq, before);
  if (comm.rank() == 1) {
    EXPECT_EQ(std::string(op.op), "recv");
    EXPECT_EQ(op.peer, 0);
  }
  comm.barrier();
}

TEST(Watchdog, TheDeadlineComesFromTheEnvironment) {
  EXPECT_EQ(comm::detail::watchdog_timeout(), settings().collective_timeout);
  // dpl_dist_tests initialises MPI with MPI_THREAD_MULTIPLE, as dpl does, so the ranks can talk.
  if (communicator("naive").size() > 1 && settings().collective_timeout > 0) {
    EXPECT_TRUE(comm::detail::watchdog_can_communicate());
  }
}

}  // namespace
}  // namespace dpl::test
