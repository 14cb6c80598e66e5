// "two_dimensional" on host memory: every rank of a node carries one slice of the buffer across
// nodes, so all ranks (not only a leader) use the inter-node links. Where the ranks of every node
// share memory, through the node's shared window (node_shared_allreduce.hpp, the algorithm
// hierarchical runs there too); otherwise by message passing:
//   1. intra_reduce     MPI_Reduce_scatter over the node: rank i gets the node's sum of slice i;
//   2. inter_allreduce  MPI_Allreduce of that slice among the ranks with this intra_rank;
//   3. intra_gather     MPI_Allgatherv over the node.
// reduce_scatter and allgather go through the window as hierarchical's do (inside the node, then
// among the ranks of equal intra_rank), where the nodes number their ranks regularly; otherwise,
// and without a window, they are the naive ones.
// Also "flat" (one MPI_Allreduce over the job: the naive algorithm under its own name, whose
// device path in NCCL builds is the pipelined staged allreduce).
#include <mpi.h>

#include <cstring>
#include <memory>
#include <vector>

#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/factories.hpp"
#include "comm/mpi/mpi_communicator.hpp"
#include "comm/mpi/windowed_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class TwoDimensionalCommunicator final : public WindowedCommunicator {
 public:
  // Step 2 adds up slice i of every node among the ranks with intra_rank i, which only covers the
  // whole buffer when every node cuts it into the same slices: with nodes of 2 and 1 ranks, the
  // second half of node 0 would never meet node 1's data. Every rank holds the same node sizes,
  // so every rank refuses alike, before any allreduce. The NCCL two_dimensional builds on this
  // host communicator and so refuses with the same message.
  explicit TwoDimensionalCommunicator(std::string name) : WindowedCommunicator(std::move(name)) {
    DPL_CHECK(even_nodes(topology_), "create_communicator('", name_, "'): the nodes have unequal numbers of ranks (node sizes ",
              node_sizes_text(topology_.node_sizes), " in rank order), but ", name_,
              " reduces each slice across the ranks of equal intra_rank and needs every node to have the same "
              "number of ranks; use hierarchical, naive or flat (or pure_nccl in NCCL builds) on uneven nodes");
    map_window();
  }

  void allreduce(Tensor& buf, ReduceOp op) override {
    check_host_buffer("allreduce", name_, buf, "buf", Use::kReduce);
    check_op("allreduce", name_, buf, op);
    if (NodeSharedAllreduce* window = shared()) {
      last_phases_ = window->allreduce(buf, op, synchronized_, "intra_gather");
      return;
    }
    const std::string what = what_call("allreduce", name_);
    const MPI_Datatype type = mpi_datatype(buf.dtype());
    const std::size_t esize = dtype_size(buf.dtype());
    const int p = intra_size();
    const int me = intra_rank();
    std::vector<int> counts(static_cast<std::size_t>(p)), displs(static_cast<std::size_t>(p));
    double phase[3] = {0, 0, 0};

    auto timed = [&](int k, auto&& f) {
      const double t0 = MPI_Wtime();
      f();
      // As in hierarchical: the barrier makes every rank of a node leave the phase together.
      if (synchronized_) DPL_MPI_CHECK(MPI_Barrier(intra()), what + ": MPI_Barrier");
      phase[k] += MPI_Wtime() - t0;
    };

    // Blocks of at most max_count() elements keep every count and displacement an int.
    for_each_chunk(buf.numel(), [&](std::int64_t off, int block) {
      char* data = static_cast<char*>(buf.raw_data()) + off * esize;
      for (int i = 0; i < p; ++i) {
        counts[static_cast<std::size_t>(i)] = block / p + (i < block % p ? 1 : 0);
        displs[static_cast<std::size_t>(i)] = i == 0 ? 0 : displs[static_cast<std::size_t>(i - 1)] + counts[static_cast<std::size_t>(i - 1)];
      }
      const int mine = counts[static_cast<std::size_t>(me)];
      char* slice = data + static_cast<std::size_t>(displs[static_cast<std::size_t>(me)]) * esize;
      if (slice_.size() < static_cast<std::size_t>(mine) * esize) slice_.resize(static_cast<std::size_t>(mine) * esize);
      timed(0, [&] {
        if (p > 1) {
          DPL_MPI_CHECK(MPI_Reduce_scatter(data, slice_.data(), counts.data(), type, MPI_SUM, intra()),
                        what + ": MPI_Reduce_scatter");
        } else {
          std::memcpy(slice_.data(), slice, static_cast<std::size_t>(mine) * esize);
        }
      });
      timed(1, [&] {
        if (inter_size() > 1 && mine > 0)
          DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, slice_.data(), mine, type, MPI_SUM, inter()),
                        what + ": MPI_Allreduce");
      });
      timed(2, [&] {
        if (p > 1) {
          DPL_MPI_CHECK(MPI_Allgatherv(slice_.data(), mine, type, data, counts.data(), displs.data(), type, intra()),
                        what + ": MPI_Allgatherv");
        } else {
          std::memcpy(slice, slice_.data(), static_cast<std::size_t>(mine) * esize);
        }
      });
    });
    // Every rank holds the whole sum, so every rank divides its own copy.
    if (op == ReduceOp::kMean) divide_in_place(buf, size());
    last_phases_ = {SubPhase{"intra_reduce", phase[0]}, SubPhase{"inter_allreduce", phase[1]},
                    SubPhase{"intra_gather", phase[2]}};
  }

 private:
  std::vector<char> slice_;  // this rank's slice; kept, so the steady state allocates nothing
};

}  // namespace

std::unique_ptr<MpiCommunicator> make_two_dimensional(const std::string& name) {
  return std::make_unique<TwoDimensionalCommunicator>(name);
}

}  // namespace dpl::comm::detail
