#include "comm/mpi/windowed_communicator.hpp"

#include "comm/checks.hpp"

namespace dpl::comm::detail {

// Whether the window serves is the same answer on every rank (scatters() is decided by the whole
// job), so every rank takes the same path and the checks fail alike on every rank.
void WindowedCommunicator::reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) {
  if (!shared_ || !shared_->scatters()) return MpiCommunicator::reduce_scatter(send, recv, op);
  check_reduce_scatter(name_, send, recv, size());
  check_op("reduce_scatter", name_, send, op);
  shared_->reduce_scatter(send.raw_data(), recv.raw_data(), recv.numel(), send.dtype(), op == ReduceOp::kMean);
}

void WindowedCommunicator::allgather(const Tensor& send, Tensor& recv) {
  if (!shared_ || !shared_->scatters()) return MpiCommunicator::allgather(send, recv);
  const bool in_place = check_allgather(name_, send, recv, rank(), size());
  shared_->allgather(send.raw_data(), recv.raw_data(), send.numel(), send.dtype(), in_place);
}

}  // namespace dpl::comm::detail
