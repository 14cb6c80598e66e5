// two_dimensional on GPU buffers: ncclReduceScatter in the node → MPI_Allreduce of each rank's
// slice with the ranks of equal intra_rank (staged or CUDA-aware) → ncclAllGather in the node.
// One node: pure_nccl's path, since reduce-scatter and all-gather inside it are an allreduce,
// which NCCL runs as one fused ring.
// Nodes of unequal sizes never get here: the host two_dimensional this one is built on refuses
// them on every rank at creation, since slice i of a node meets only the ranks of intra_rank i.
#include "backend/cuda/comm_interop.hpp"
#include "comm/checks.hpp"
#include "comm/factories.hpp"
#include "comm/nccl/device_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class TwoDimensionalDeviceCommunicator final : public NodeDeviceCommunicator {
 public:
  using NodeDeviceCommunicator::NodeDeviceCommunicator;

 protected:
  // A length not divisible by the node size goes through a zero-padded scratch buffer.
  double steps(Tensor& buf, ncclComm_t intra) override {
    const std::string what = what_call("allreduce", name_);
    const ncclDataType_t type = nccl_type(buf.dtype());
    cudaStream_t s = nccl_.stream();
    const int p = intra_size();
    const std::int64_t n = buf.numel();
    const std::size_t esize = dtype_size(buf.dtype());
    const std::int64_t slice = (n + p - 1) / p;
    char* work = static_cast<char*>(buf.raw_data());
    const bool padded = slice * p != n;
    if (padded) {
      const std::int64_t need = static_cast<std::int64_t>(slice * p * esize);
      if (!pad_.defined() || pad_.nbytes() < static_cast<std::size_t>(need))
        pad_ = Tensor::empty({(need + 3) / 4}, TensorOptions(kFloat32, buf.device()));
      work = static_cast<char*>(pad_.raw_data());
      DPL_CUDA_CHECK(cudaMemcpyAsync(work, buf.raw_data(), static_cast<std::size_t>(n) * esize, cudaMemcpyDeviceToDevice, s));
      DPL_CUDA_CHECK(cudaMemsetAsync(work + n * esize, 0, static_cast<std::size_t>(slice * p - n) * esize, s));
    }
    char* mine = work + static_cast<std::size_t>(intra_rank() * slice) * esize;
    if (p > 1)
      DPL_NCCL_CHECK(ncclReduceScatter(work, mine, static_cast<std::size_t>(slice), type, ncclSum, intra, s), what);
    events_.record(kIntraEnd, s);
    const double inter_seconds = inter_.run(nccl_.groups().inter, mine, slice, buf.dtype(), nccl_.device(), s, events_);
    events_.record(kGatherBegin, s);
    if (p > 1) DPL_NCCL_CHECK(ncclAllGather(mine, work, static_cast<std::size_t>(slice), type, intra, s), what);
    if (padded)
      DPL_CUDA_CHECK(cudaMemcpyAsync(buf.raw_data(), work, static_cast<std::size_t>(n) * esize, cudaMemcpyDeviceToDevice, s));
    return inter_seconds;
  }

 private:
  Tensor pad_;  // the zero-padded copy of a buffer whose length the node size does not divide
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_two_dimensional(std::unique_ptr<Communicator> host,
                                                        const MpiGroups& groups) {
  return std::make_unique<TwoDimensionalDeviceCommunicator>(std::move(host), groups);
}

}  // namespace dpl::comm::detail
