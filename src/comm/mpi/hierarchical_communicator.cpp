// "hierarchical": allreduce in three steps, so that the slow inter-node links carry each
// node's data once instead of once per rank. Where the ranks of every node share memory (always
// on one machine, virtual nodes included), the steps run through the node's shared window
// (node_shared_allreduce.hpp): every rank adds up a slice of the node's sum, carries that slice
// across nodes and copies the whole result out, so no rank handles more than its share and the
// phases are intra_reduce, inter_allreduce, intra_bcast (the copy out). Where they do not (a
// virtual node spread over machines), message passing through the node's leader:
//   1. intra_reduce     MPI_Reduce to intra_rank 0 over the node's communicator;
//   2. inter_allreduce  MPI_Allreduce among the intra_rank-0 ranks, one per node;
//   3. intra_bcast      MPI_Bcast from intra_rank 0 over the node.
// reduce_scatter and allgather run through the same window where its blocks map onto the nodes
// (NodeSharedAllreduce::scatters(): equal nodes, ranks numbered node by node): inside the node
// first, then among the ranks of equal intra_rank across nodes. Elsewhere (uneven nodes, nodes
// that cannot share memory, nodes of one rank) they, and the other collectives, are the naive ones.

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>

#include "comm/checks.hpp"
#include "comm/factories.hpp"
#include "comm/mpi/mpi_communicator.hpp"
#include "comm/mpi/windowed_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class HierarchicalCommunicator final : public WindowedCommunicator {
 public:
  explicit HierarchicalCommunicator(std::string name)
      : WindowedCommunicator(std::move(name)) {
    map_window();
  }

  void allreduce(Tensor& buf, ReduceOp op) override {
    check_host_buffer("allreduce", name_, buf, "buf", Use::kReduce);
    check_op("allreduce", name_, buf, op);
    last_phases_.clear();
    if (NodeSharedAllreduce* window = shared()) {
      last_phases_ = window->allreduce(buf, op, synchronized_, "intra_bcast");
      return;
    }
    const bool leader = intra_rank() == 0;
    void* data = buf.raw_data();
    const std::int64_t n = buf.numel();
    const DType dtype = buf.dtype();

    double t = MPI_Wtime();
    auto end_phase = [&](const char* name, bool last = false) {
      // With the barrier every rank of a node leaves a phase together, so a rank that had nothing
      // to do in it (a non-leader during inter_allreduce) reports the time it waited for it.
      if (synchronized_ && !last) DPL_MPI_CHECK(MPI_Barrier(intra()), what_call("allreduce", name_) + ": MPI_Barrier");
      const double now = MPI_Wtime();
      last_phases_.push_back(SubPhase{name, now - t});
      t = now;
    };

    if (intra_size() > 1) reduce_sum_to_root(intra(), data, n, dtype, 0, leader, "allreduce");
    end_phase("intra_reduce");
    if (leader) {
      if (inter_size() > 1) allreduce_sum(inter(), data, n, dtype, "allreduce");
      // Only the leaders divide; the broadcast then carries the mean.
      if (op == ReduceOp::kMean) divide_in_place(buf, size());
    }
    end_phase("inter_allreduce");
    if (intra_size() > 1) bcast(intra(), data, n, dtype, 0, "allreduce");
    end_phase("intra_bcast", true);
  }
};

}  // namespace

std::unique_ptr<MpiCommunicator> make_hierarchical(const std::string& name) {
  return std::make_unique<HierarchicalCommunicator>(name);
}

}  // namespace dpl::comm::detail
