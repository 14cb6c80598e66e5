// flat on GPU buffers: MPI_Allreduce over all ranks on the whole buffer, staged through pinned
// memory in a pipeline or read directly by a CUDA-aware MPI. No NCCL in the allreduce (its other
// collectives are the common NCCL ones); it reduces in float32 only.
#include "comm/factories.hpp"
#include "comm/nccl/device_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class FlatDeviceCommunicator final : public DeviceCommunicator {
 public:
  FlatDeviceCommunicator(std::unique_ptr<Communicator> host, const MpiGroups& groups)
      : DeviceCommunicator(std::move(host), groups, /*narrows=*/false) {}

 protected:
  bool reduce(Tensor& buf, bool mean) override {
    stepped_allreduce(buf, mean, [&] {
      cudaStream_t s = nccl_.stream();
      events_.record(kIntraEnd, s);
      const double inter_seconds =
          inter_.run(nccl_.groups().world, buf.raw_data(), buf.numel(), buf.dtype(), nccl_.device(), s, events_);
      events_.record(kGatherBegin, s);
      return inter_seconds;
    }, &flat_phases);
    return true;
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_flat(std::unique_ptr<Communicator> host, const MpiGroups& groups) {
  return std::make_unique<FlatDeviceCommunicator>(std::move(host), groups);
}

}  // namespace dpl::comm::detail
