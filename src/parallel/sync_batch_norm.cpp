#include "dpl/parallel/sync_batch_norm.hpp"

#include <utility>

#include "dpl/nn/normalization.hpp"

namespace dpl::parallel {

namespace {
// The sum over a communicator's ranks that a synchronised BatchNorm asks for.
class CommunicatorSum final : public nn::CrossProcessSum {
 public:
  explicit CommunicatorSum(std::shared_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {}
  void sum(Tensor& buffer) override { comm_->allreduce(buffer, comm::ReduceOp::kSum); }
  int processes() const override { return comm_->size(); }

 private:
  std::shared_ptr<comm::Communicator> comm_;
};
}  // namespace

std::size_t convert_sync_batchnorm(nn::Module& model, std::shared_ptr<comm::Communicator> comm) {
  const std::shared_ptr<nn::CrossProcessSum> sum =
      comm != nullptr && comm->size() > 1 ? std::make_shared<CommunicatorSum>(std::move(comm)) : nullptr;
  std::size_t changed = 0;
  model.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNormBase*>(&m)) {
      bn->synchronize_statistics(sum);
      ++changed;
    }
  });
  return changed;
}

}  // namespace dpl::parallel
