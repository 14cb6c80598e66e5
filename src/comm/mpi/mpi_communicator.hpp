#pragma once
// MpiCommunicator: host-memory collectives over MPI. As constructed it is the "naive"
// communicator (every collective is one MPI call over the whole job); subclasses replace the
// algorithms they improve on and reuse the rest.

#include <string>

#include "comm/mpi/mpi_runtime.hpp"
#include "dpl/comm/communicator.hpp"

namespace dpl::comm::detail {

/// The MPI communicators a host communicator runs on, for the device communicators that wrap it
/// and run their own steps over the same groups. Owned by that MpiCommunicator: valid while it
/// lives.
struct MpiGroups {
  /// All ranks of the job (the communicator's duplicate of MPI_COMM_WORLD).
  MPI_Comm world = MPI_COMM_NULL;
  /// The ranks of this node, ordered by world rank.
  MPI_Comm intra = MPI_COMM_NULL;
  /// The ranks with this intra_rank on every node, ordered by node.
  MPI_Comm inter = MPI_COMM_NULL;
};

class MpiCommunicator : public Communicator {
 public:
  /// Initialises MPI if needed, duplicates MPI_COMM_WORLD, builds the topology (hardware nodes,
  /// or DPL_RANKS_PER_NODE virtual ones) and its intra and inter communicators, and applies the
  /// host-thread rule on the first call in the process. Collective over MPI_COMM_WORLD.
  explicit MpiCommunicator(std::string name);

  std::string name() const override { return name_; }
  void allreduce(Tensor& buf, ReduceOp op) override;
  void broadcast(Tensor& buf, int root) override;
  void allgather(const Tensor& send, Tensor& recv) override;
  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override;
  void barrier() override;
  void send(const Tensor& buf, int dest, int tag) override;
  void recv(Tensor& buf, int source, int tag) override;

  /// The groups this communicator runs on, for communicators that wrap it (see MpiGroups).
  MpiGroups groups() const { return MpiGroups{world_.get(), intra_.get(), inter_.get()}; }

 protected:
  /// All ranks (a duplicate of MPI_COMM_WORLD, so our traffic never matches the program's own).
  MPI_Comm world() const { return world_.get(); }
  /// The ranks of this node, ordered by world rank.
  MPI_Comm intra() const { return intra_.get(); }
  /// The ranks with this intra_rank on every node, ordered by node.
  MPI_Comm inter() const { return inter_.get(); }

  // Chunked in-place building blocks over any of the communicators above.
  void allreduce_sum(MPI_Comm comm, void* data, std::int64_t n, DType dtype, const char* what) const;
  void reduce_sum_to_root(MPI_Comm comm, void* data, std::int64_t n, DType dtype, int root, bool is_root,
                          const char* what) const;
  void bcast(MPI_Comm comm, void* data, std::int64_t n, DType dtype, int root, const char* what) const;

  std::string name_;

 private:
  void build_topology();
  void apply_thread_rule(int processes_on_host);

  CommHandle world_;
  CommHandle intra_;
  CommHandle inter_;
  int tag_ub_ = 32767;
};

}  // namespace dpl::comm::detail
