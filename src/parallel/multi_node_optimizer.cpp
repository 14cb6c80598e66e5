#include "dpl/parallel/multi_node_optimizer.hpp"

#include "dpl/core/cuda.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::parallel {

namespace {
// Waits for the device's queued work, so that a synchronized phase ends when its work does.
void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}
}  // namespace

MultiNodeOptimizer::MultiNodeOptimizer(std::unique_ptr<optim::Optimizer> actual,
                                       std::shared_ptr<comm::Communicator> comm, profile::TimingMode mode)
    : actual_(std::move(actual)), comm_(std::move(comm)) {
  DPL_CHECK(actual_ != nullptr, "MultiNodeOptimizer: the wrapped optimizer is null");
  DPL_CHECK(comm_ != nullptr, "MultiNodeOptimizer: the communicator is null");
  set_timing_mode(mode);
}

void MultiNodeOptimizer::set_timing_mode(profile::TimingMode mode) {
  mode_ = mode;
  comm_->set_synchronized(mode == profile::TimingMode::kSynchronized);
}

void MultiNodeOptimizer::setup(nn::Module& model) {
  target_ = &model;
  reducer_ = std::make_unique<GradientReducer>(model, *comm_);
  broadcast_parameters();
  actual_->setup(model);
  // The wrapped optimizer may have recast the model (MixedPrecision builds its float32 masters
  // from the weights just broadcast, then casts them): check and align the ranks on the arena
  // that training will use, now rather than at the first update.
  if (reducer_->needs_broadcast()) broadcast_parameters();
}

void MultiNodeOptimizer::broadcast_parameters() {
  reducer_->broadcast_parameters();
  // Gradients travel as float32 buffers of the arena's length (a 16-bit model's through its
  // float32 master gradients), whatever the dtype of the parameters.
  timer_.set_allreduce_size(static_cast<std::size_t>(reducer_->model().arena().numel()) * dtype_size(kFloat32),
                            comm_->size());
}

void MultiNodeOptimizer::sync_point() {
  if (mode_ != profile::TimingMode::kSynchronized) return;
  synchronize(target().device());
  comm_->barrier();
}

void MultiNodeOptimizer::allreduce_and_step() {
  nn::Module& model = target();
  if (reducer_->needs_broadcast()) broadcast_parameters();
  // What is averaged is what the wrapped optimizer will read: the arena's gradients, or a mixed
  // precision optimizer's float32 master gradients and overflow flag.
  const std::vector<Tensor> buffers = actual_->prepare_gradients();
  sync_point();
  {
    profile::ScopedPhase phase(timer_, "allreduce", iteration_);
    reducer_->allreduce_gradients(buffers);
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(model.device());
  }
  for (const auto& sub : reducer_->last_phases())
    timer_.record("allreduce/" + sub.name, profile::now_seconds() - sub.seconds, sub.seconds, iteration_);
  sync_point();
  {
    profile::ScopedPhase phase(timer_, "optimize", iteration_);
    actual_->update();
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(model.device());
  }
  ++iteration_;
}

void MultiNodeOptimizer::update() {
  DPL_CHECK(target_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  allreduce_and_step();
}

Variable MultiNodeOptimizer::update(const std::function<Variable()>& loss_fn) {
  DPL_CHECK(target_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  sync_point();
  Variable loss;
  {
    profile::ScopedPhase phase(timer_, "compute", iteration_);
    zero_grad();
    loss = loss_fn();
    actual_->backward(loss);
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
  }
  allreduce_and_step();
  return loss;
}

void MultiNodeOptimizer::zero_grad() { target().zero_grad(); }

profile::Summary MultiNodeOptimizer::summary(std::int64_t skip_warmup) const {
  return profile::summarize(timer_, comm_.get(), skip_warmup);
}

std::unique_ptr<MultiNodeOptimizer> create_multi_node_optimizer(std::unique_ptr<optim::Optimizer> actual,
                                                                std::shared_ptr<comm::Communicator> comm,
                                                                profile::TimingMode mode) {
  return std::make_unique<MultiNodeOptimizer>(std::move(actual), std::move(comm), mode);
}

}  // namespace dpl::parallel
