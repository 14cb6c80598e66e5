// Topology (hardware and virtual nodes), DPL_RANKS_PER_NODE, and the host-thread rule.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/environment.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm/agreement.hpp"
#include "dpl/core/settings.hpp"
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
// ranks following world order inside a node, sizes agreeing with the members and with this
// rank's node_sizes.
void expect_consistent(const std::vector<comm::Topology>& all, const std::vector<int>& node_sizes,
                       const std::string& what) {
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
  std::vector<int> counted;
  for (const auto& m : members)
    if (!m.empty()) counted.push_back(static_cast<int>(m.size()));
  EXPECT_EQ(node_sizes, counted) << what;
}

// The node of each rank for node sizes in rank order.
std::vector<int> nodes_of_ranks(const std::vector<int>& sizes) {
  std::vector<int> node;
  for (std::size_t i = 0; i < sizes.size(); ++i) node.insert(node.end(), static_cast<std::size_t>(sizes[i]), static_cast<int>(i));
  return node;
}

// Sums and means that every rank can predict exactly: rank + 1 summed over the job.
void expect_allreduce_exact(comm::Communicator& comm, const std::string& what) {
  const int size = comm.size();
  Tensor buf = Tensor::full({1001}, comm.rank() + 1, kInt64);
  comm.allreduce(buf);
  EXPECT_EQ(buf.to_vector<std::int64_t>(), std::vector<std::int64_t>(1001, std::int64_t{size} * (size + 1) / 2))
      << what;
  Tensor f = Tensor::full({33}, comm.rank(), kFloat32);
  comm.allreduce(f, comm::ReduceOp::kMean);
  EXPECT_EQ(f.to_vector<float>(), std::vector<float>(33, (size - 1) / 2.0f)) << what;
}

// Layouts with nodes of unequal sizes for a job of `size` ranks (none for one rank).
std::vector<std::vector<int>> uneven_layouts(int size) {
  std::vector<std::vector<int>> out;
  if (size < 3) return out;
  out.push_back({size - 1, 1});  // 3 ranks: 2+1
  out.push_back({1, size - 1});
  if (size >= 5) out.push_back({size - 2, 2});  // 5 ranks: 3+2
  if (size >= 4) out.push_back({1, size - 3, 2});
  return out;
}

TEST(Topology, ConsistentAcrossRanksAndCommunicators) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    const auto all = gather_topologies(comm);
    expect_consistent(all, comm.topology().node_sizes, name);
    const std::vector<int> asked = settings().ranks_per_node;
    if (asked.size() == 1) {
      const int per_node = asked[0];
      EXPECT_EQ(comm.intra_size(), per_node);
      EXPECT_EQ(comm.intra_rank(), comm.rank() % per_node);
      EXPECT_EQ(comm.inter_rank(), comm.rank() / per_node);
      EXPECT_EQ(comm.inter_size(), comm.size() / per_node);
      EXPECT_TRUE(comm::even_nodes(comm.topology()));
    } else if (asked.size() > 1) {
      // This run's layout is a list of node sizes (the uneven ctest entries).
      EXPECT_EQ(comm.topology().node_sizes, asked) << name;
      EXPECT_EQ(comm.inter_rank(), nodes_of_ranks(asked)[static_cast<std::size_t>(comm.rank())]) << name;
      EXPECT_EQ(comm.intra_size(), asked[static_cast<std::size_t>(comm.inter_rank())]) << name;
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
    EXPECT_EQ(comm->topology().node_sizes, std::vector<int>(static_cast<std::size_t>(size / k), k)) << what;
    expect_consistent(gather_topologies(*comm), comm->topology().node_sizes, what);
    expect_allreduce_exact(*comm, what);
  }
}

// Uneven virtual nodes: each communicator that supports them has the listed topology and reduces
// exactly; two_dimensional refuses on every rank with a message that names the node sizes.
TEST(Topology, UnevenVirtualNodes) {
  const int size = communicator("naive").size();
  const auto layouts = uneven_layouts(size);
  if (layouts.empty()) GTEST_SKIP() << "needs three ranks for nodes of unequal sizes";
  for (const auto& layout : layouts) {
    const std::string text = comm::detail::node_sizes_text(layout);
    const ScopedEnv env("DPL_RANKS_PER_NODE", text);
    const std::string what = "DPL_RANKS_PER_NODE=" + text;
    const int node = nodes_of_ranks(layout)[static_cast<std::size_t>(communicator("naive").rank())];
    for (const char* name : {"naive", "hierarchical", "flat"}) {
      auto comm = comm::create_communicator(name);
      const std::string where = what + " " + name;
      EXPECT_EQ(comm->inter_rank(), node) << where;
      EXPECT_EQ(comm->inter_size(), static_cast<int>(layout.size())) << where;
      EXPECT_EQ(comm->intra_size(), layout[static_cast<std::size_t>(node)]) << where;
      EXPECT_EQ(comm->topology().node_sizes, layout) << where;
      EXPECT_FALSE(comm::even_nodes(comm->topology())) << where;
      expect_consistent(gather_topologies(*comm), comm->topology().node_sizes, where);
      expect_allreduce_exact(*comm, where);
    }
    std::string refusal;
    try {
      comm::create_communicator("two_dimensional");
    } catch (const Error& e) {
      refusal = e.what();
    }
    EXPECT_NE(refusal.find("create_communicator('two_dimensional')"), std::string::npos) << what << ": " << refusal;
    EXPECT_NE(refusal.find("node sizes " + text), std::string::npos) << what << ": " << refusal;
    EXPECT_NE(refusal.find("use hierarchical"), std::string::npos) << what << ": " << refusal;
    // Refused on every rank, with the same words: no rank went on to wait in a collective.
    Tensor refused = Tensor::full({1}, refusal.empty() ? 0 : 1, kInt32);
    communicator("naive").allreduce(refused);
    EXPECT_EQ(refused.to_vector<std::int32_t>()[0], size) << what;
    EXPECT_TRUE(comm::ranks_differing_from_rank0(communicator("naive"), refusal).empty()) << what;
  }
}

TEST(Topology, NodeSizesMustAddUpToTheJob) {
  const int size = communicator("naive").size();
  for (const std::string& bad : {std::to_string(size) + ",1", std::string("1,1")}) {
    if (bad == "1,1" && size == 2) continue;  // adds up for two ranks
    const ScopedEnv env("DPL_RANKS_PER_NODE", bad);
    std::string what;
    try {
      comm::create_communicator("hierarchical");
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("DPL_RANKS_PER_NODE=" + bad), std::string::npos) << what;
    EXPECT_NE(what.find("the job has " + std::to_string(size) + " ranks"), std::string::npos) << what;
    EXPECT_NE(what.find("add up to"), std::string::npos) << what;
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
      // It points to the uneven layout closest to what was asked.
      EXPECT_NE(what.find("DPL_RANKS_PER_NODE=" + std::to_string(size)), std::string::npos) << what;
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
