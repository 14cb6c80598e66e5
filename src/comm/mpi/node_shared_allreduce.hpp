#pragma once
// The host-memory allreduce of hierarchical and two_dimensional: a reduce-scatter and an
// allgather through a window of shared memory that the ranks of a node read and write directly,
// with only each rank's share of the node's sum crossing to the other nodes. See
// docs/communicators.md ("Host memory: the node's shared window") for the algorithm. The window and
// the algorithm over it are node_shared_allreduce.cpp; the reduce-scatter and allgather through the
// same window node_shared_scatter_gather.cpp; the node's barrier in the window is node_barrier.hpp,
// the copies and sums node_shared_sums.hpp, the tests' overrides test_hooks.hpp.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/window_store_choice.hpp"
#include "dpl/comm/communicator.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::comm::detail {

/// Seconds one allreduce spent in each of its steps, summed over its chunks.
struct SharedAllreducePhases {
  double intra_reduce = 0;     // copy into the window, wait for the node, add this rank's slice
  double inter_allreduce = 0;  // MPI_Allreduce of the slice across nodes (and the division of a mean)
  double intra_gather = 0;     // wait for the node, copy the node's result out of the window
};

class NodeSharedAllreduce {
 public:
  /// Collective over `world` (every rank of the job calls it with its own groups). Returns null
  /// on every rank when the ranks of some node cannot share memory (a virtual node spread over two
  /// machines); the caller then keeps its message-passing algorithm. Otherwise every node of
  /// several ranks maps one window of shared memory. `t` is this rank's topology. Destroying it is
/// local (no communication).
  static std::unique_ptr<NodeSharedAllreduce> create(MPI_Comm world, MPI_Comm intra, MPI_Comm inter,
                                                     const Topology& t, const std::string& comm_name);
  ~NodeSharedAllreduce();
  NodeSharedAllreduce(const NodeSharedAllreduce&) = delete;
  NodeSharedAllreduce& operator=(const NodeSharedAllreduce&) = delete;

  /// In place over the job: data (n elements of a float32, int32 or int64 host buffer, the same n
  /// on every rank) becomes the sum over all ranks, or with `mean` (float32 only) that sum divided
  /// by the job's size. Collective over the job. With `synchronized`, the ranks of a node also
  /// wait for each other after the reduction and after the inter-node step, so that every rank
  /// reports the same split into phases.
  SharedAllreducePhases run(void* data, std::int64_t n, DType dtype, bool mean, bool synchronized);

  /// run() on a float32, int32 or int64 host tensor, as the communicators call it: returns the
  /// sub-phases intra_reduce, inter_allreduce and `gather_phase` (the name the communicator
  /// reports its third step under).
  std::vector<SubPhase> allreduce(Tensor& buf, ReduceOp op, bool synchronized, const char* gather_phase);

  /// Bytes of each rank's buffer that one round of the pipeline moves (the same on every rank).
  std::int64_t chunk_bytes() const { return chunk_bytes_; }

  /// Whether reduce_scatter and allgather below can run: every node maps a window, the nodes have
  /// equal numbers of ranks (at least two), and world ranks follow nodes regularly (rank = node *
  /// ranks per node + intra_rank, as virtual nodes and block-launched machines give). The same
  /// answer on every rank; where false the communicator keeps its message-passing collectives.
  bool scatters() const { return scatters_; }
  /// Requires scatters(), n_per_rank elements of a float32, int32 or int64 dtype per rank block
  /// (send holds size() blocks, rank-major; recv one block, not overlapping send), the same on
  /// every rank. Ensures recv = this rank's block of the sum over all ranks (divided by the job's
  /// size with `mean`, float32 only). The node's ranks add in intra_rank order, then the nodes'
  /// sums meet in one MPI reduce-scatter among the ranks of this intra_rank. Collective.
  void reduce_scatter(const void* send, void* recv, std::int64_t n_per_rank, DType dtype, bool mean);
  /// Requires scatters(), send of n_per_rank elements of any dtype, recv of size() blocks (send
  /// either apart from recv or exactly this rank's block: `in_place`). Ensures recv holds every
  /// rank's send, rank-major. Across nodes first (an MPI allgather among the ranks of this
  /// intra_rank), then through the window. Collective.
  void allgather(const void* send, void* recv, std::int64_t n_per_rank, DType dtype, bool in_place);

 private:
  struct Control;
  NodeSharedAllreduce() = default;
  void node_barrier();
  // Whether this chunk writes the window with streaming stores: the setting, or with kMeasured
  // what the node's first rank last published (the same on every rank of the node).
  bool streaming_stores() const;

  std::string what_;       // "allreduce (<name>)", the prefix of errors
  std::string comm_name_;  // for the errors of reduce_scatter and allgather
  MPI_Comm intra_ = MPI_COMM_NULL;
  MPI_Comm inter_ = MPI_COMM_NULL;
  int local_rank_ = 0;     // intra_rank
  int local_size_ = 1;     // intra_size: the ranks of this node
  int inter_size_ = 1;     // nodes
  int inter_slices_ = 1;   // slices per chunk across nodes: the smallest node's size
  int job_size_ = 1;       // the divisor of a mean
  bool all_single_ = false;   // every node has one rank: no window anywhere
  bool scatters_ = false;     // reduce_scatter and allgather can run (see scatters())
  bool oversubscribed_ = false;  // more processes than CPUs on this machine: waiting ranks sleep at once
  std::int64_t chunk_bytes_ = 0;
  WindowStoresSetting stores_ = WindowStoresSetting::kMeasured;
  WindowStoreChoice store_choice_;  // the node's first rank's measurements (kMeasured)

  bool map_window(MPI_Comm intra);

  char* window_ = nullptr;           // this rank's mapping of the node's window
  std::size_t window_bytes_ = 0;
  std::string shm_name_;             // on the leader, until every rank has mapped the window
  Control* control_ = nullptr;       // the node's barrier, in the window
  char* result_ = nullptr;           // one chunk: the node's sum, slice by slice
  std::vector<char*> inputs_;        // one chunk per rank of the node: its contribution
  std::vector<char> node_blocks_;    // several nodes: the node's sums (or the gathered blocks) of
                                     // this intra_rank, one block per node
};

}  // namespace dpl::comm::detail
