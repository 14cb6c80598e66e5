// pure_nccl and single_node on GPU buffers: one ncclAllReduce over all ranks. single_node is the
// same algorithm for jobs that must stay on one node, and refuses any other at creation.
#include "comm/factories.hpp"
#include "comm/nccl/device_communicator.hpp"

namespace dpl::comm::detail {

namespace {

class PureNcclCommunicator final : public DeviceCommunicator {
 public:
  PureNcclCommunicator(std::unique_ptr<Communicator> host, const MpiGroups& groups, bool one_node_only)
      : DeviceCommunicator(std::move(host), groups, /*narrows=*/true) {
    // Refused on every rank alike (same topology everywhere), after the collective creation.
    DPL_CHECK(!one_node_only || topology_.inter_size == 1, "create_communicator('", name_, "'): the job spans ",
              topology_.inter_size, " nodes (inter_size ", topology_.inter_size, "), but ", name_,
              " runs NCCL within one node only; use hierarchical, two_dimensional or pure_nccl");
  }

 protected:
  bool reduce(Tensor& buf, bool mean) override {
    world_allreduce(buf, mean);
    return true;
  }
};

}  // namespace

std::unique_ptr<Communicator> make_pure_nccl(std::unique_ptr<Communicator> host, const MpiGroups& groups) {
  return std::make_unique<PureNcclCommunicator>(std::move(host), groups, false);
}

std::unique_ptr<Communicator> make_single_node(std::unique_ptr<Communicator> host, const MpiGroups& groups) {
  return std::make_unique<PureNcclCommunicator>(std::move(host), groups, true);
}

}  // namespace dpl::comm::detail
