#include "dpl/parallel/multi_node_optimizer.hpp"

#include <utility>

#include "parallel/data_parallel_stage.hpp"

namespace dpl::parallel {

namespace {
std::unique_ptr<DataParallelStage> make_stage(std::shared_ptr<comm::Communicator> comm, profile::TimingMode mode) {
  DPL_CHECK(comm != nullptr, "MultiNodeOptimizer: the communicator is null");
  return std::make_unique<DataParallelStage>(std::move(comm), mode);
}
}  // namespace

MultiNodeOptimizer::MultiNodeOptimizer(std::unique_ptr<optim::Optimizer> actual,
                                       std::shared_ptr<comm::Communicator> comm, profile::TimingMode mode)
    : OptimizerWrapper("MultiNodeOptimizer", std::move(actual), make_stage(std::move(comm), mode)),
      stage_(static_cast<DataParallelStage&>(*stage())) {}

MultiNodeOptimizer::~MultiNodeOptimizer() = default;

void MultiNodeOptimizer::set_overlap(const OverlapOptions& options) { stage_.set_overlap(options); }
const OverlapOptions& MultiNodeOptimizer::overlap() const { return stage_.overlap(); }
void MultiNodeOptimizer::set_zero_stage(int stage) { stage_.set_zero_stage(stage); }
int MultiNodeOptimizer::zero_stage() const { return stage_.zero_stage(); }
void MultiNodeOptimizer::set_shard_optimizer_state(bool on) { stage_.set_zero_stage(on ? 1 : 0); }
bool MultiNodeOptimizer::shards_optimizer_state() const { return stage_.zero_stage() > 0; }
std::int64_t MultiNodeOptimizer::optimizer_state_bytes() const { return stage_.optimizer_state_bytes(); }
void MultiNodeOptimizer::set_buffer_sync(BufferSync when) { stage_.set_buffer_sync(when); }
BufferSync MultiNodeOptimizer::buffer_sync() const { return stage_.buffer_sync(); }
void MultiNodeOptimizer::synchronize_buffers() { stage_.synchronize_buffers(); }
comm::Communicator& MultiNodeOptimizer::communicator() const { return stage_.communicator(); }
profile::PhaseTimer& MultiNodeOptimizer::timer() { return stage_.timer(); }
const profile::PhaseTimer& MultiNodeOptimizer::timer() const { return stage_.timer(); }
profile::TimingMode MultiNodeOptimizer::timing_mode() const { return stage_.timing_mode(); }
void MultiNodeOptimizer::set_timing_mode(profile::TimingMode mode) { stage_.set_timing_mode(mode); }
profile::Summary MultiNodeOptimizer::summary(std::int64_t skip_warmup) const { return stage_.summary(skip_warmup); }

std::unique_ptr<MultiNodeOptimizer> create_multi_node_optimizer(std::unique_ptr<optim::Optimizer> actual,
                                                                std::shared_ptr<comm::Communicator> comm,
                                                                profile::TimingMode mode) {
  return std::make_unique<MultiNodeOptimizer>(std::move(actual), std::move(comm), mode);
}

}  // namespace dpl::parallel
