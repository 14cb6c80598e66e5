// Topology (hardware and virtual nodes), DPL_RANKS_PER_NODE, and the host-thread rule.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/environment.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm.hpp"
#include "dpl/core/threads.hpp"

namespace dpl::test {
namespace {

// Every rank's topology, rank-major, gathered through comm itself.
std::vector<comm::Topology> gather_topologies(comm::Communicator& comm) {
  const comm::Topology& t = comm.topology();
  Tensor mine = Tensor::from_vector<std::int32_t>(
      {t.rank, t.size, t.intra_rank, t.intra_size, t.inter_rank, t.inter_size, t.host_rank, t.host_size}, {8});
  Tensor all = Tensor::empty({comm.size() * 8}, kInt32);
  comm.allgather(mine, all);
  const auto v = all.to_vector<std::int32_t>();
  std::vector<comm::Topology> out;
  for (int r = 0; r < comm.size(); ++r) {
    const auto* w = v.data() + r * 8;
    out.push_back(comm::Topology{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]});
  }
  return out;
}

// The invariants of any topology: nodes numbered 0..inter_size-1 by their lowest rank, intra
// ranks following world order inside a node, sizes agreeing with the members.
void expect_consistent(const std::vector<comm::Topology>& all, const std::string& what) {
  const int size = static_cast<int>(all.size());
  std::vector<std::vector<int>> members(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(all[r].rank, r) << what;
    EXPECT_EQ(all[r].size, size) << what;
    // The tests run on one machine: every rank shares it, whatever the virtual nodes.
    EXPECT_EQ(all[r].host_size, size) << what;
    EXPECT_EQ(all[r].host_rank, r) << what;
    EXPECT_EQ(all[r].inter_size, all[0].inter_size) << what;
    ASSERT_GE(all[r].inter_rank, 0) << what;
    ASSERT_LT(all[r].inter_rank, all[r].inter_size) << what;
    members[static_cast<std::size_t>(all[r].inter_rank)].push_back(r);
  }
  int first_of_previous = -1;
  for (int node = 0; node < all[0].inter_size; ++node) {
    const auto& m = members[static_cast<std::size_t>(node)];
    ASSERT_FALSE(m.empty()) << what << ": node " << node << " has no ranks";
    EXPECT_GT(m.front(), first_of_previous) << what << ": nodes are numbered by their lowest rank";
    first_of_previous = m.front();
    for (std::size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(all[m[i]].intra_rank, static_cast<int>(i)) << what << ": rank " << m[i];
      EXPECT_EQ(all[m[i]].intra_size, static_cast<int>(m.size())) << what << ": rank " << m[i];
    }
  }
}

TEST(Topology, ConsistentAcrossRanksAndCommunicators) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    const auto all = gather_topologies(comm);
    expect_consistent(all, name);
    if (const char* k = std::getenv("DPL_RANKS_PER_NODE")) {
      const int per_node = std::atoi(k);
      EXPECT_EQ(comm.intra_size(), per_node);
      EXPECT_EQ(comm.intra_rank(), comm.rank() % per_node);
      EXPECT_EQ(comm.inter_rank(), comm.rank() / per_node);
      EXPECT_EQ(comm.inter_size(), comm.size() / per_node);
    }
  }
  EXPECT_EQ(communicator("naive").topology().intra_size, communicator("hierarchical").topology().intra_size);
}

TEST(Topology, EveryVirtualNodeSizeThatDividesTheJob) {
  const int size = communicator("naive").size();
  for (int k = 1; k <= size; ++k) {
    if (size % k != 0) continue;
    const ScopedEnv env("DPL_RANKS_PER_NODE", std::to_string(k));
    auto comm = comm::create_communicator("hierarchical");
    const std::string what = "DPL_RANKS_PER_NODE=" + std::to_string(k);
    EXPECT_EQ(comm->intra_size(), k) << what;
    EXPECT_EQ(comm->intra_rank(), comm->rank() % k) << what;
    EXPECT_EQ(comm->inter_size(), size / k) << what;
    EXPECT_EQ(comm->inter_rank(), comm->rank() / k) << what;
    expect_consistent(gather_topologies(*comm), what);

    Tensor buf = Tensor::full({1001}, comm->rank() + 1, kInt64);
    comm->allreduce(buf);
    EXPECT_EQ(buf.to_vector<std::int64_t>(), std::vector<std::int64_t>(1001, std::int64_t{size} * (size + 1) / 2))
        << what;
    Tensor f = Tensor::full({33}, comm->rank(), kFloat32);
    comm->allreduce(f, comm::ReduceOp::kMean);
    EXPECT_EQ(f.to_vector<float>(), std::vector<float>(33, (size - 1) / 2.0f)) << what;
  }
}

TEST(Topology, RanksPerNodeMustDivideTheJob) {
  const int size = communicator("naive").size();
  {
    // size + 1 never divides size: a local error on every rank, before any collective.
    const ScopedEnv env("DPL_RANKS_PER_NODE", std::to_string(size + 1));
    try {
      comm::create_communicator("hierarchical");
      ADD_FAILURE() << "expected dpl::Error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("DPL_RANKS_PER_NODE=" + std::to_string(size + 1)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(size) + " ranks"), std::string::npos) << what;
    }
  }
  for (const char* bad : {"0", "-2", "two", "3x"}) {
    const ScopedEnv env("DPL_RANKS_PER_NODE", std::string(bad));
    EXPECT_THROW(comm::create_communicator("naive"), Error) << bad;
  }
}

TEST(Threads, Rule) {
  using comm::detail::choose_num_threads;
  EXPECT_EQ(choose_num_threads(std::nullopt, false, 16, 4), 4);
  EXPECT_EQ(choose_num_threads(std::nullopt, false, 16, 3), 5);
  EXPECT_EQ(choose_num_threads(std::nullopt, false, 2, 4), 1);  // never below one
  EXPECT_EQ(choose_num_threads(std::nullopt, true, 16, 4), std::nullopt);  // OMP_NUM_THREADS decides
  EXPECT_EQ(choose_num_threads(3, true, 16, 4), 3);  // DPL_NUM_THREADS wins
  EXPECT_GE(comm::detail::affinity_cpus(), 1);
  EXPECT_GE(comm::detail::hardware_cpus(), comm::detail::affinity_cpus());
}

TEST(Threads, SetWhenTheFirstCommunicatorIsCreated) {
  communicator("naive");
  if (const char* n = std::getenv("DPL_NUM_THREADS")) {
    EXPECT_EQ(num_threads(), std::atoi(n));
  }
  EXPECT_GE(num_threads(), 1);
}

}  // namespace
}  // namespace dpl::test
