#include "comm/nccl/device_communicator.hpp"

#include "backend/cuda/comm_interop.hpp"
#include "comm/checks.hpp"
#include "comm/factories.hpp"
#include "comm/mpi/mpi_runtime.hpp"

namespace dpl::comm::detail {

namespace {

bool on_device(const Tensor& t) { return t.defined() && t.device().is_cuda(); }

}  // namespace

DeviceCommunicator::DeviceCommunicator(std::unique_ptr<Communicator> host, const MpiGroups& groups, bool narrows)
    : name_(host->name()),
      staged_(make_staging(std::move(host))),
      inter_(name_),
      nccl_(name_, groups, *staged_),
      narrows_(narrows) {
  topology_ = staged_->topology();
}

void DeviceCommunicator::set_synchronized(bool on) {
  synchronized_ = on;
  staged_->set_synchronized(on);
}

// --- allreduce -------------------------------------------------------------------------------------

void DeviceCommunicator::allreduce(Tensor& buf, ReduceOp op) {
  if (!on_device(buf)) return host_call([&] { staged_->allreduce(buf, op); });
  check_buffer("allreduce", name_, buf, "buf", Use::kReduce, true);
  check_op("allreduce", name_, buf, op);
  nccl_.bind(buf, "allreduce");
  if (buf.numel() == 0) {
    last_phases_.clear();
    return;
  }
  reduce(buf, op == ReduceOp::kMean);
}

void DeviceCommunicator::allreduce_narrowed(Tensor& buf, ReduceOp op, DType wire_dtype) {
  if (!narrows_) return Communicator::allreduce_narrowed(buf, op, wire_dtype);
  check_buffer("allreduce", name_, buf, "buf", Use::kReduce, true);
  nccl_.bind(buf, "allreduce");
  const std::int64_t n = buf.numel();
  if (n == 0) {
    last_phases_.clear();
    return;
  }
  if (!half_.defined() || half_.numel() < n || half_.dtype() != wire_dtype)
    half_ = Tensor::empty({n}, TensorOptions(wire_dtype, buf.device()));
  Tensor half = half_.view_range(0, {n});
  const int device = nccl_.device();
  backend::comm_interop::launch_cast(buf.raw_data(), kFloat32, half.raw_data(), wire_dtype, n, 1.0f, device,
                            nccl_.compute_stream());
  if (!reduce(half, false)) {
    // Ranks share a GPU, so NCCL cannot run: the MPI path over pinned memory, in float32.
    host_call([&] { staged_->allreduce(buf, op); });
    return;
  }
  const float divisor = op == ReduceOp::kMean ? static_cast<float>(size()) : 1.0f;
  backend::comm_interop::launch_cast(half.raw_data(), wire_dtype, buf.raw_data(), kFloat32, n, divisor, device,
                            nccl_.compute_stream());
}

void DeviceCommunicator::world_allreduce(Tensor& buf, bool mean) {
  const std::string what = what_call("allreduce", name_);
  ncclComm_t world = nccl_.world();
  DPL_CHECK(world != nullptr, what, ": NCCL needs one GPU per rank, but ranks of this job share a GPU (", size(),
            " ranks); choose the GPU with select_device_for_local_rank on distinct GPUs, or use hierarchical, "
            "which falls back to MPI");
  nccl_.begin();
  DPL_NCCL_CHECK(ncclAllReduce(buf.raw_data(), buf.raw_data(), static_cast<std::size_t>(buf.numel()),
                               nccl_type(buf.dtype()), ncclSum, world, nccl_.stream()),
                 what);
  nccl_.end();
  if (mean) divide_by_size(buf);
  last_phases_.clear();
}

void DeviceCommunicator::stepped_allreduce(Tensor& buf, bool mean, const std::function<double()>& steps,
                                           std::vector<SubPhase> (*phases)(const PhaseTimes&)) {
  events_.create(nccl_.device());
  nccl_.begin();
  events_.record(kIntraBegin, nccl_.stream());
  const double inter_seconds = steps();
  events_.record(kGatherEnd, nccl_.stream());
  nccl_.end();
  if (mean) divide_by_size(buf);
  last_phases_ = phases(events_.finish(inter_seconds, synchronized_));
}

void DeviceCommunicator::divide_by_size(Tensor& buf) {
  backend::comm_interop::launch_cast(buf.raw_data(), kFloat32, buf.raw_data(), kFloat32, buf.numel(),
                            static_cast<float>(size()), nccl_.device(), nccl_.compute_stream());
}

bool NodeDeviceCommunicator::reduce(Tensor& buf, bool mean) {
  if (inter_size() == 1 && nccl_.world() != nullptr) {
    world_allreduce(buf, mean);
    return true;
  }
  ncclComm_t intra = nccl_.intra();
  if (intra == nullptr) {
    if (buf.dtype() == kBFloat16 || buf.dtype() == kFloat16) return false;
    host_call([&] { staged_->allreduce(buf, mean ? ReduceOp::kMean : ReduceOp::kSum); });
    return true;
  }
  stepped_allreduce(buf, mean, [&] { return steps(buf, intra); }, &node_phases);
  return true;
}

// --- the other collectives ---------------------------------------------------------------------------

void DeviceCommunicator::broadcast(Tensor& buf, int root) {
  if (!on_device(buf)) return host_call([&] { staged_->broadcast(buf, root); });
  check_buffer("broadcast", name_, buf, "buf", Use::kMove, true);
  check_root("broadcast", name_, root, size());
  nccl_.bind(buf, "broadcast");
  ncclComm_t world = nccl_.world();
  if (!world) return host_call([&] { staged_->broadcast(buf, root); });
  nccl_.begin();
  DPL_NCCL_CHECK(ncclBroadcast(buf.raw_data(), buf.raw_data(), buf.nbytes(), ncclChar, root, world, nccl_.stream()),
                 what_call("broadcast", name_));
  nccl_.end();
}

void DeviceCommunicator::allgather(const Tensor& send, Tensor& recv) {
  if (!on_device(send) || !on_device(recv)) return host_call([&] { staged_->allgather(send, recv); });
  check_allgather(name_, send, recv, rank(), size(), true);
  nccl_.bind(send, "allgather");
  nccl_.bind(recv, "allgather");
  ncclComm_t world = nccl_.world();
  if (!world) return host_call([&] { staged_->allgather(send, recv); });
  nccl_.begin();
  DPL_NCCL_CHECK(ncclAllGather(send.raw_data(), recv.raw_data(), send.nbytes(), ncclChar, world, nccl_.stream()),
                 what_call("allgather", name_));
  nccl_.end();
}

void DeviceCommunicator::reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) {
  if (!on_device(send) || !on_device(recv)) return host_call([&] { staged_->reduce_scatter(send, recv, op); });
  check_reduce_scatter(name_, send, recv, size(), true);
  check_op("reduce_scatter", name_, send, op);
  nccl_.bind(send, "reduce_scatter");
  nccl_.bind(recv, "reduce_scatter");
  ncclComm_t world = nccl_.world();
  if (!world) return host_call([&] { staged_->reduce_scatter(send, recv, op); });
  nccl_.begin();
  DPL_NCCL_CHECK(ncclReduceScatter(send.raw_data(), recv.raw_data(), static_cast<std::size_t>(recv.numel()),
                                   nccl_type(recv.dtype()), ncclSum, world, nccl_.stream()),
                 what_call("reduce_scatter", name_));
  nccl_.end();
  if (op == ReduceOp::kMean) divide_by_size(recv);
}

void DeviceCommunicator::barrier() { staged_->barrier(); }

// NCCL has no tags: messages between two ranks match in the order they are posted. The host
// waits for the transfer, as the blocking MPI send and recv do.
void DeviceCommunicator::send(const Tensor& buf, int dest, int tag) {
  if (!on_device(buf)) return staged_->send(buf, dest, tag);
  check_buffer("send", name_, buf, "buf", Use::kMove, true);
  check_peer("send", name_, dest, rank(), size(), tag, tag_upper_bound());
  nccl_.bind(buf, "send");
  ncclComm_t world = nccl_.world();
  if (!world) return staged_->send(buf, dest, tag);
  nccl_.begin();
  DPL_NCCL_CHECK(ncclSend(buf.raw_data(), buf.nbytes(), ncclChar, dest, world, nccl_.stream()), what_call("send", name_));
  nccl_.end();
  DPL_CUDA_CHECK(cudaStreamSynchronize(nccl_.stream()));
}

void DeviceCommunicator::recv(Tensor& buf, int source, int tag) {
  if (!on_device(buf)) return staged_->recv(buf, source, tag);
  check_buffer("recv", name_, buf, "buf", Use::kMove, true);
  check_peer("recv", name_, source, rank(), size(), tag, tag_upper_bound());
  nccl_.bind(buf, "recv");
  ncclComm_t world = nccl_.world();
  if (!world) return staged_->recv(buf, source, tag);
  nccl_.begin();
  DPL_NCCL_CHECK(ncclRecv(buf.raw_data(), buf.nbytes(), ncclChar, source, world, nccl_.stream()),
                 what_call("recv", name_));
  nccl_.end();
  DPL_CUDA_CHECK(cudaStreamSynchronize(nccl_.stream()));
}

}  // namespace dpl::comm::detail
