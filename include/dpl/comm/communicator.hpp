#pragma once
// Communicators: the collectives of data-parallel training, over MPI (and, in CUDA builds, NCCL).
//
// See docs/communicators.md for the algorithms, the topology rules and the error behaviour.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/core/dtype.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::comm {

/// Point-to-point tags that dpl's own functions use (scatter_dataset's shards). They sit at the
/// top of the range every MPI guarantees (32767), so a program that sends and receives on the
/// same communicator stays clear of them with tags below kFirstReservedTag.
enum ReservedTag : int {
  kFirstReservedTag = 32700,
  kScatterSamplesTag = kFirstReservedTag,  // scatter_dataset: a shard's samples
  kScatterLabelsTag,                        // scatter_dataset: a shard's labels
};

/// Reduction applied by allreduce and reduce_scatter. kMean is the sum divided by size(); it is
/// defined for floating-point buffers only (an integer buffer with kMean throws dpl::Error, since a
/// silently truncated mean is rarely what a caller wants: reduce with kSum and divide instead).
enum class ReduceOp { kSum, kMean };

/// Where this process sits. Ranks of one node form the intra-node group (intra_rank,
/// intra_size); ranks with the same intra_rank on different nodes form an inter-node group.
/// inter_rank is the node's index and inter_size the number of nodes; nodes are numbered by
/// their lowest world rank, and intra ranks follow world-rank order inside a node.
struct Topology {
  int rank = 0;
  int size = 1;
  int intra_rank = 0;
  int intra_size = 1;
  int inter_rank = 0;
  int inter_size = 1;
  /// Rank among the processes of this physical machine (MPI_COMM_TYPE_SHARED) and their number;
  /// equal to intra_rank/intra_size unless DPL_RANKS_PER_NODE makes virtual nodes. Pick a GPU by
  /// host_rank: virtual nodes on one machine still share its GPUs.
  int host_rank = 0;
  int host_size = 1;
  /// The number of ranks of each node, by node index (inter_size entries summing to size); the
  /// same on every rank. Nodes may differ in size (uneven nodes: a cluster whose hosts hold
  /// different numbers of GPUs, or DPL_RANKS_PER_NODE=2,1).
  std::vector<int> node_sizes = {1};
};

/// Whether every node of `t` has the same number of ranks.
bool even_nodes(const Topology& t);

/// Choices fixed when a communicator is created (see create_communicator).
struct CommOptions {
  /// Wire dtype in which data-parallel training (parallel::GradientReducer) reduces the float32
  /// gradient arena: kFloat32 (default), kBFloat16 or kFloat16. A 16-bit type halves the bytes on
  /// the wire (see Communicator::allreduce with a wire dtype). Only the NCCL communicators
  /// (pure_nccl, single_node, hierarchical, two_dimensional in NCCL builds) accept a 16-bit type,
  /// and only for a gradient arena on a GPU.
  DType allreduce_dtype = DType::kFloat32;
};

/// Time spent in one sub-phase of the last allreduce (e.g. "intra_reduce").
struct SubPhase {
  std::string name;
  double seconds = 0.0;
};

/// A group of processes and the collectives among them. Created by create_communicator().
///
/// Buffers are contiguous tensors of float32, int32 or int64 on the host or, in CUDA builds, on
/// this process's GPU for the communicators that say so. Collectives that only move data
/// (broadcast, allgather, send, recv) also accept bfloat16 and float16. Every collective must be
/// called by every rank of the group, in the same order, with buffers of equal shape and dtype.
/// What can be checked locally (definedness, device, contiguity, dtype, the sizes of send against
/// recv, roots and peers in range) is checked before any communication, and a violation throws
/// dpl::Error naming the collective and the communicator, what was expected and what came; a
/// check that fails fails on every rank that passed the same arguments, so nothing hangs.
///
/// Collectives are called from the thread that initialised MPI (normally the main thread); host
/// kernels may use other threads meanwhile, but only that thread communicates.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// Name as passed to create_communicator ("naive", "hierarchical", ...).
  virtual std::string name() const = 0;
  /// This process's place in the job; fixed for the communicator's lifetime.
  const Topology& topology() const { return topology_; }
  /// Rank in the job, 0 <= rank() < size().
  int rank() const { return topology_.rank; }
  /// Number of processes in the job.
  int size() const { return topology_.size; }
  /// Rank among the processes of this node.
  int intra_rank() const { return topology_.intra_rank; }
  /// Number of processes on this node.
  int intra_size() const { return topology_.intra_size; }
  /// Index of this node.
  int inter_rank() const { return topology_.inter_rank; }
  /// Number of nodes.
  int inter_size() const { return topology_.inter_size; }
  int host_rank() const { return topology_.host_rank; }
  int host_size() const { return topology_.host_size; }

  // --- collectives over contiguous buffers ------------------------------------------------------
  /// In place: buf = op over all ranks' buf. Requires a reducible dtype (float32, int32, int64;
  /// kMean: float32 only). Ensures every rank holds the same values afterwards; last_phases()
  /// then describes this call.
  virtual void allreduce(Tensor& buf, ReduceOp op = ReduceOp::kSum) = 0;
  /// As allreduce(buf, op), with the elements carried (and summed) in wire_dtype. wire_dtype equal
  /// to buf's dtype is allreduce(buf, op). Otherwise requires a float32 buffer on a GPU, wire_dtype
  /// kBFloat16 or kFloat16, op kSum or kMean, and a communicator that reduces 16-bit types on the
  /// GPU (the NCCL ones listed at CommOptions::allreduce_dtype), else throws dpl::Error. Ensures
  /// buf holds the result cast back to float32 (with the division of kMean done in float32):
  /// half the bytes on the wire, 16-bit rounding in the result. Where ranks share a GPU, NCCL
  /// cannot run and the buffer is reduced in float32 instead.
  void allreduce(Tensor& buf, ReduceOp op, DType wire_dtype);
  /// In place: every rank's buf = root's buf. Requires 0 <= root < size().
  virtual void broadcast(Tensor& buf, int root = 0) = 0;
  /// recv (size() * send.numel() elements, rank-major) = every rank's send, concatenated.
  /// Requires recv of the same dtype as send and not overlapping it, except that send may be
  /// exactly this rank's block of recv (in-place allgather).
  virtual void allgather(const Tensor& send, Tensor& recv) = 0;
  /// recv (send.numel() / size() elements) = this rank's slice of op over all ranks' send.
  /// Requires send.numel() divisible by size(), recv of the same dtype, no overlap of the two.
  virtual void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op = ReduceOp::kSum) = 0;
  /// Returns once every rank has entered the barrier.
  virtual void barrier() = 0;
  /// Point to point: blocks until buf has been sent to rank dest. Requires dest != rank() and
  /// 0 <= tag <= the MPI tag bound (at least 32767); tags from kFirstReservedTag on are dpl's.
  virtual void send(const Tensor& buf, int dest, int tag = 0) = 0;
  /// Point to point: blocks until buf has been received from rank source, which must have sent
  /// exactly buf.numel() elements of buf's dtype with this tag (else dpl::Error).
  virtual void recv(Tensor& buf, int source, int tag = 0) = 0;

  /// The options this communicator was created with.
  const CommOptions& options() const { return options_; }

  /// The sub-phases of the last allreduce (empty for single-step algorithms).
  const std::vector<SubPhase>& last_phases() const { return last_phases_; }
  /// When on, the algorithm puts a barrier between sub-phases so that each is attributed cleanly
  /// (slower; for profiling). Off by default. Must be set to the same value on every rank.
  virtual void set_synchronized(bool on) { synchronized_ = on; }
  /// Whether sub-phases are separated by barriers (see set_synchronized).
  bool synchronized() const { return synchronized_; }

 protected:
  /// allreduce with a 16-bit wire dtype, called once the arguments passed the checks above (buf
  /// float32 on a GPU, wire_dtype kBFloat16 or kFloat16, op kSum or kMean). The default throws
  /// dpl::Error: host algorithms reduce in float32 only.
  virtual void allreduce_narrowed(Tensor& buf, ReduceOp op, DType wire_dtype);

  Topology topology_;
  std::vector<SubPhase> last_phases_;
  bool synchronized_ = false;

 private:
  friend std::shared_ptr<Communicator> create_communicator(const std::string& name, const CommOptions& options);
  CommOptions options_;
};

/// Whether communicators may be called from a thread other than the one that created them, one
/// thread at a time (MPI initialised with at least MPI_THREAD_SERIALIZED, as dpl initialises it;
/// always true without MPI). The overlapped gradient allreduce needs it.
bool calls_from_other_threads_allowed();

/// Collective over comm: every rank's `mine` (the same length on every rank), in rank order, as
/// one vector of comm.size() * mine.size() doubles, identical on every rank. The values travel as
/// their 64-bit patterns (an allgather of int64), so they arrive exactly, and sums that every
/// rank forms from them in rank order agree to the bit. Throws dpl::Error on every rank when the
/// ranks' lengths differ.
std::vector<double> allgather_doubles(Communicator& comm, const std::vector<double>& mine);

/// The names create_communicator accepts in this build, in a stable order.
std::vector<std::string> communicator_names();

/// Creates the named communicator over all processes of the job (MPI_COMM_WORLD).
/// Ownership is shared: everything that keeps a communicator beyond one call
/// (parallel::MultiNodeOptimizer, parallel::GradientReducer, train::Trainer) holds this
/// shared_ptr, so the communicator lives as long as its last user.
/// Must be called by every rank, in the same order as any other collective call.
///
/// Initialises MPI if the program has not (and finalises it at exit), and accepts an MPI the
/// program initialised itself (which the program then finalises). Topology comes from
/// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); the environment variable DPL_RANKS_PER_NODE=k
/// instead groups ranks [0,k), [k,2k), ... into virtual nodes (size must be divisible by k), and
/// DPL_RANKS_PER_NODE=a,b,... into nodes of a, b, ... ranks in rank order (they must add up to
/// size). Nodes of unequal sizes work with every communicator except two_dimensional, which then
/// throws dpl::Error on every rank naming the node sizes (see docs/communicators.md).
/// The first call sets the host threads of this process to cores / processes-on-this-host unless
/// DPL_NUM_THREADS (used as given) or OMP_NUM_THREADS is set.
/// After this call an uncaught exception on any rank prints "rank R: what()" and aborts every rank.
/// Throws dpl::Error listing the valid names for an unknown name, and on every rank, naming the
/// setting and each rank's value, when the ranks asked for different names, options or
/// DPL_RANKS_PER_NODE.
/// Every call of the returned communicator (and this one) has a deadline: when one waits longer
/// than DPL_COLLECTIVE_TIMEOUT seconds (default 600; 0: none) the collective watchdog reports the
/// operation, its sequence number and the ranks that did not arrive, and aborts the job (see
/// docs/reliability.md). For it the first call initialises MPI with MPI_THREAD_MULTIPLE.
///
/// In a build without MPI every name gives a one-process communicator (rank 0 of size 1) whose
/// collectives are local copies, so single-process programs run unchanged.
std::shared_ptr<Communicator> create_communicator(const std::string& name = "hierarchical");

/// As create_communicator(name), with options. Throws dpl::Error (on every rank, before any
/// communication) when the named communicator cannot honour them, e.g. a 16-bit allreduce_dtype
/// for a communicator without NCCL, or a dtype other than float32, bfloat16 or float16.
std::shared_ptr<Communicator> create_communicator(const std::string& name, const CommOptions& options);

/// Prints "rank R: message" to stderr and aborts every rank of the job (MPI_Abort) — what an
/// uncaught exception does after create_communicator(). For programs that catch errors
/// themselves. Never returns.
[[noreturn]] void abort_all(const std::string& message, int exit_code = 1);

}  // namespace dpl::comm
