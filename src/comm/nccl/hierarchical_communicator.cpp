// hierarchical on GPU buffers: ncclReduce to intra_rank 0 → MPI_Allreduce among the intra_rank-0
// ranks (staged or CUDA-aware) → ncclBroadcast in the node. One node: pure_nccl's path.
// Uneven nodes work: only the leaders (one per node) cross nodes, and NCCL's reduce and broadcast
// take a node of any size.
#include "comm/checks.hpp"
#include "comm/factories.hpp"
#include "comm/nccl/device_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class HierarchicalDeviceCommunicator final : public NodeDeviceCommunicator {
 public:
  using NodeDeviceCommunicator::NodeDeviceCommunicator;

 protected:
  double steps(Tensor& buf, ncclComm_t intra) override {
    const std::string what = what_call("allreduce", name_);
    void* data = buf.raw_data();
    const auto n = static_cast<std::size_t>(buf.numel());
    const ncclDataType_t type = nccl_type(buf.dtype());
    cudaStream_t s = nccl_.stream();
    if (intra_size() > 1) DPL_NCCL_CHECK(ncclReduce(data, data, n, type, ncclSum, 0, intra, s), what);
    events_.record(kIntraEnd, s);
    double inter_seconds = 0.0;
    if (intra_rank() == 0) {
      inter_seconds = inter_.run(nccl_.groups().inter, data, buf.numel(), buf.dtype(), nccl_.device(), s, events_);
    } else {
      for (PhaseMark m : {kD2hBegin, kD2hEnd, kH2dBegin, kH2dEnd}) events_.record(m, s);
    }
    events_.record(kGatherBegin, s);
    if (intra_size() > 1) DPL_NCCL_CHECK(ncclBroadcast(data, data, n, type, 0, intra, s), what);
    return inter_seconds;
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_hierarchical(std::unique_ptr<Communicator> host, const MpiGroups& groups) {
  return std::make_unique<HierarchicalDeviceCommunicator>(std::move(host), groups);
}

}  // namespace dpl::comm::detail
