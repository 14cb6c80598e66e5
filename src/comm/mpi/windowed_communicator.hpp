#pragma once
// The base of the host communicators that run through the node's shared window (hierarchical,
// two_dimensional): it owns the window (node_shared_allreduce.hpp) and runs reduce_scatter and
// allgather through it where its blocks map onto the nodes, keeping MpiCommunicator's
// message-passing collectives elsewhere. Each subclass runs its own allreduce over shared().

#include <memory>
#include <string>

#include "comm/mpi/mpi_communicator.hpp"
#include "comm/mpi/node_shared_allreduce.hpp"

namespace dpl::comm::detail {

class WindowedCommunicator : public MpiCommunicator {
 public:
  /// Through the window when shared() && shared()->scatters(); otherwise MpiCommunicator's.
  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override;
  void allgather(const Tensor& send, Tensor& recv) override;

 protected:
  using MpiCommunicator::MpiCommunicator;
  /// Maps the node's window (collective over the job; see NodeSharedAllreduce::create). A
  /// subclass calls it once its own refusals have passed, so that every rank refuses first.
  void map_window() { shared_ = NodeSharedAllreduce::create(world(), intra(), inter(), topology_, name_); }
  /// The window; null where some node cannot share memory.
  NodeSharedAllreduce* shared() const { return shared_.get(); }

 private:
  std::unique_ptr<NodeSharedAllreduce> shared_;
};

}  // namespace dpl::comm::detail
