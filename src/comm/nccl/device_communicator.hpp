#pragma once
// The plumbing every device communicator of NCCL builds shares, whatever its allreduce: host
// buffers (and device buffers where NCCL cannot run) go to the wrapped MPI communicator through
// the staging wrapper, so every name keeps working on the host and in CI; the first device buffer
// binds the communicator to its GPU; and broadcast, allgather, reduce_scatter, send and recv run
// on one NCCL communicator over all ranks. Each algorithm (pure_nccl, hierarchical,
// two_dimensional, flat) is a subclass that implements reduce().

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.hpp"
#include "comm/nccl/inter_node_step.hpp"
#include "comm/nccl/nccl_context.hpp"
#include "comm/nccl/phase_events.hpp"
#include "dpl/comm/communicator.hpp"

namespace dpl::comm::detail {

class DeviceCommunicator : public Communicator {
 public:
  std::string name() const override { return name_; }
  void set_synchronized(bool on) override;

  void allreduce(Tensor& buf, ReduceOp op) override;
  void broadcast(Tensor& buf, int root) override;
  void allgather(const Tensor& send, Tensor& recv) override;
  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override;
  void barrier() override;
  void send(const Tensor& buf, int dest, int tag) override;
  void recv(Tensor& buf, int source, int tag) override;

 protected:
  /// Wraps `host` (see DeviceMaker in comm/factories.hpp), running MPI steps over `groups`.
  /// `narrows`: whether allreduce takes a 16-bit wire dtype.
  DeviceCommunicator(std::unique_ptr<Communicator> host, const MpiGroups& groups, bool narrows);

  void allreduce_narrowed(Tensor& buf, ReduceOp op, DType wire_dtype) override;

  /// The algorithm. Requires buf non-empty and contiguous on the bound GPU, of a reducible dtype
  /// or (from allreduce_narrowed, with mean false) a 16-bit one. Ensures, in compute-stream
  /// order, buf = the sum over all ranks, divided by size() when mean, and sets last_phases_.
  /// Returns false, having done nothing, only for a 16-bit buf where NCCL cannot run (ranks
  /// share a GPU): the caller then reduces the float32 data on the host path.
  virtual bool reduce(Tensor& buf, bool mean) = 0;

  // --- building blocks of the algorithms ----------------------------------------------------------
  /// pure_nccl's path: one ncclAllReduce over all ranks, no sub-phases. Throws dpl::Error when
  /// ranks share a GPU.
  void world_allreduce(Tensor& buf, bool mean);
  /// The frame of a multi-step algorithm: orders our stream after the compute stream, records
  /// the first and last sub-phase marks around steps() (which queues the steps on nccl_.stream(),
  /// records the marks in between and returns the seconds its MPI step took), orders the compute
  /// stream after ours, divides for mean, and publishes the sub-phases named by `phases`.
  void stepped_allreduce(Tensor& buf, bool mean, const std::function<double()>& steps,
                         std::vector<SubPhase> (*phases)(const PhaseTimes&));

  const std::string name_;
  std::unique_ptr<Communicator> staged_;  // host buffers, and device buffers where NCCL cannot run
  PhaseEvents events_;
  InterNodeStep inter_;
  NcclContext nccl_;  // destroyed first: waits for our stream before the rest goes

  /// Runs f, a call of staged_, and reports staged_'s sub-phases as ours.
  template <typename F>
  void host_call(F&& f) {
    f();
    last_phases_ = staged_->last_phases();
  }

 private:
  void divide_by_size(Tensor& buf);

  const bool narrows_;
  Tensor half_;  // the 16-bit copy of a narrowed allreduce, kept for the next call
};

/// The algorithms that run NCCL inside each node and MPI across nodes (hierarchical,
/// two_dimensional). With one node, their steps are one allreduce among the node's GPUs, so they
/// take world_allreduce's path, with no sub-phase events, which keeps them at raw NCCL's speed.
/// Where ranks of a node share a GPU, the host algorithm runs over pinned memory, in float32.
/// Otherwise steps() runs inside stepped_allreduce, reporting the five node sub-phases.
class NodeDeviceCommunicator : public DeviceCommunicator {
 public:
  NodeDeviceCommunicator(std::unique_ptr<Communicator> host, const MpiGroups& groups)
      : DeviceCommunicator(std::move(host), groups, /*narrows=*/true) {}

 protected:
  bool reduce(Tensor& buf, bool mean) final;
  /// Queues the algorithm's steps over buf on nccl_.stream(), with intra the NCCL communicator of
  /// the node, recording kIntraEnd, the d2h/h2d marks and kGatherBegin in between. Returns the
  /// seconds its MPI step took on this rank.
  virtual double steps(Tensor& buf, ncclComm_t intra) = 0;
};

}  // namespace dpl::comm::detail
