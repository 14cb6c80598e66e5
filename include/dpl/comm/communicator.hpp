#pragma once
// Communicators: the collectives of data-parallel training, over MPI (and, in CUDA builds, NCCL).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/tensor/tensor.hpp"

namespace dpl::nn {
class Module;
}

namespace dpl::comm {

/// Reduction applied by allreduce and reduce_scatter. kMean is the sum divided by size().
enum class ReduceOp { kSum, kMean };

/// Where this process sits. Ranks of one node form the intra-node group (intra_rank,
/// intra_size); ranks with the same intra_rank on different nodes form an inter-node group
/// (inter_rank = node index, inter_size = number of nodes).
struct Topology {
  int rank = 0;
  int size = 1;
  int intra_rank = 0;
  int intra_size = 1;
  int inter_rank = 0;
  int inter_size = 1;
};

/// Time spent in one sub-phase of the last allreduce_grad (e.g. "intra_reduce").
struct SubPhase {
  std::string name;
  double seconds = 0.0;
};

/// A group of processes and the collectives among them. Created by create_communicator().
///
/// Buffers are contiguous tensors of float32, int32 or int64 (plus bfloat16/float16 where a
/// communicator says so) on the host or, in CUDA builds, on this process's GPU. Every collective
/// must be called by every rank with buffers of equal shape and dtype; shapes are checked locally
/// and a mismatch throws dpl::Error naming the collective, the expected and the received shape.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// Name as passed to create_communicator ("naive", "hierarchical", ...).
  virtual std::string name() const = 0;
  const Topology& topology() const { return topology_; }
  int rank() const { return topology_.rank; }
  int size() const { return topology_.size; }
  int intra_rank() const { return topology_.intra_rank; }
  int intra_size() const { return topology_.intra_size; }
  int inter_rank() const { return topology_.inter_rank; }
  int inter_size() const { return topology_.inter_size; }

  // --- collectives over contiguous buffers ------------------------------------------------------
  /// In place: buf = op over all ranks' buf.
  virtual void allreduce(Tensor& buf, ReduceOp op = ReduceOp::kSum) = 0;
  /// In place: every rank's buf = root's buf.
  virtual void broadcast(Tensor& buf, int root = 0) = 0;
  /// recv (size() * send.numel() elements, rank-major) = every rank's send, concatenated.
  virtual void allgather(const Tensor& send, Tensor& recv) = 0;
  /// recv (send.numel() / size() elements) = this rank's slice of op over all ranks' send.
  /// Requires send.numel() divisible by size().
  virtual void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op = ReduceOp::kSum) = 0;
  virtual void barrier() = 0;
  /// Point to point: blocks until buf has been sent to / received from the given rank.
  virtual void send(const Tensor& buf, int dest, int tag = 0) = 0;
  virtual void recv(Tensor& buf, int source, int tag = 0) = 0;

  // --- data parallel ----------------------------------------------------------------------------
  /// Every rank's parameters = rank 0's (one broadcast over the parameter arena).
  virtual void bcast_data(nn::Module& model);
  /// Every rank's gradients = their mean over all ranks (one allreduce over the gradient arena).
  virtual void allreduce_grad(nn::Module& model);

  /// The sub-phases of the last allreduce (empty for single-step algorithms).
  const std::vector<SubPhase>& last_phases() const { return last_phases_; }
  /// When on, the algorithm puts a barrier between sub-phases so that each is attributed cleanly
  /// (slower; for profiling). Off by default.
  void set_synchronized(bool on) { synchronized_ = on; }
  bool synchronized() const { return synchronized_; }

 protected:
  Topology topology_;
  std::vector<SubPhase> last_phases_;
  bool synchronized_ = false;
};

/// The names create_communicator accepts in this build.
std::vector<std::string> communicator_names();

/// Creates the named communicator over all processes of the job (MPI_COMM_WORLD).
/// Initialises MPI if the program has not (and finalises it at exit), and accepts an MPI the
/// program initialised itself. Topology comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED);
/// the environment variable DPL_RANKS_PER_NODE=k instead groups ranks [0,k), [k,2k), ... into
/// virtual nodes (size must be divisible by k). Sets the host threads of this process to
/// cores / processes-on-this-host unless DPL_NUM_THREADS or OMP_NUM_THREADS is set.
/// After this call an uncaught exception on any rank prints its message and aborts every rank.
/// Throws dpl::Error listing the valid names for an unknown name.
std::unique_ptr<Communicator> create_communicator(const std::string& name = "hierarchical");

/// Prints "rank R: message" to stderr and aborts every rank of the job (MPI_Abort) — what an
/// uncaught exception does after create_communicator(). For programs that catch errors
/// themselves. Never returns.
[[noreturn]] void abort_all(const std::string& message, int exit_code = 1);

}  // namespace dpl::comm
