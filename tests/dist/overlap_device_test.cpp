// Allreduce overlapped with backward on a GPU: the buckets run on a side stream of the GPU while
// the compute stream runs backward. The parameters after training are bit-identical to the same
// buckets reduced after backward — with a bfloat16 wire, whose conversion reads the gradients on
// the side stream, so a bucket started before backward finished it (or an optimizer that read
// before the side stream finished) would change them — for float32 models and 16-bit ones under
// MixedPrecision, on every communicator that runs on this layout; and the times are the GPU's.
// With one rank (ctest's dist_n1_overlap_gpu) NCCL itself runs; with ranks sharing a GPU the
// device communicators take their MPI path through host memory, from the worker thread.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/autograd/ops.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/nn.hpp"
#include "dpl/optim/mixed_precision.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"

namespace dpl::test {
namespace {

constexpr int kSteps = 3;
// Wide enough that backward takes a while on the GPU and the arena (~1.3M floats) splits into
// many buckets.
constexpr std::int64_t kFeatures = 256, kUnits = 1024, kClasses = 10, kBatch = 512;
parallel::OverlapOptions buckets() { return {true, std::size_t{1} << 20, std::size_t{64} << 10}; }

class OverlapDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
    const HostPlace place = host_place();
    shared_gpus_ = place.local_size > cuda_device_count();
    device_ = Device::cuda(place.local_rank % cuda_device_count());
    cuda::set_device(device_.index);
  }

  // The communicators this layout runs, with the wire each is tried in: bfloat16 where NCCL can
  // carry it (the conversions then run on the side stream), float32 for the others.
  std::vector<std::pair<std::string, DType>> communicators() const {
    std::vector<std::pair<std::string, DType>> out;
    for (const auto& name : host_communicator_names()) {
      if (name == "pure_nccl" && shared_gpus_) continue;  // NCCL needs one GPU per rank
      out.emplace_back(name, reduces_16bit(name) ? kBFloat16 : kFloat32);
    }
    return out;
  }

  std::unique_ptr<nn::MLP> fresh_model() const {
    Generator gen(11);  // the same weights on every rank
    auto model = std::make_unique<nn::MLP>(kUnits, kFeatures, kClasses, gen);
    model->to(device_);
    return model;
  }

  std::function<Variable()> loss_of(nn::Module& model, comm::Communicator& comm, int step, DType dtype) const {
    const Shard s = batch_shard(comm, 300 + static_cast<std::uint64_t>(step), kBatch * comm.size(), kFeatures,
                                kClasses);
    const Tensor x = s.x.to(device_).to(dtype);
    const Tensor y = s.y.to(device_);
    return [&model, x, y] { return softmax_cross_entropy(model(Variable(x)), y); };
  }

  // kSteps of SGD driven by hand through a GradientReducer (any rank count, one included): the
  // buckets overlapped with backward, or reduced after it. dtype bfloat16: under MixedPrecision.
  std::vector<float> train(const std::shared_ptr<comm::Communicator>& shared, DType dtype, bool overlapped,
                           parallel::OverlapTimes* last_times = nullptr) const {
    comm::Communicator& comm = *shared;
    auto model = fresh_model();
    std::unique_ptr<optim::Optimizer> opt = std::make_unique<optim::SGD>(0.05f);
    if (dtype != kFloat32) opt = optim::mixed_precision(std::move(opt), dtype);
    parallel::GradientReducer reducer(*model, shared);
    reducer.set_overlap(buckets());
    reducer.broadcast_parameters();
    opt->setup(*model);
    reducer.broadcast_parameters();
    for (int step = 0; step < kSteps; ++step) {
      model->zero_grad();
      const Variable loss = loss_of(*model, comm, step, dtype)();
      if (overlapped) reducer.begin_backward(nullptr, opt->gradient_ranges());
      opt->backward(loss);
      if (!overlapped) reducer.begin_backward(nullptr, opt->gradient_ranges());
      const parallel::OverlapTimes times = reducer.finish_backward();
      if (last_times != nullptr) *last_times = times;
      opt->update();
    }
    return model->arena().params().to(Device::cpu()).to(kFloat32).to_vector<float>();
  }

  // kSteps through a MultiNodeOptimizer with overlap on (which overlaps on two or more ranks).
  std::vector<float> train_multi_node(const std::shared_ptr<comm::Communicator>& shared, DType dtype) const {
    comm::Communicator& comm = *shared;
    auto model = fresh_model();
    std::unique_ptr<optim::Optimizer> opt = std::make_unique<optim::SGD>(0.05f);
    if (dtype != kFloat32) opt = optim::mixed_precision(std::move(opt), dtype);
    parallel::MultiNodeOptimizer multi(std::move(opt), shared);
    multi.set_overlap(buckets());
    multi.setup(*model);
    for (int step = 0; step < kSteps; ++step) multi.update(loss_of(*model, comm, step, dtype));
    return model->arena().params().to(Device::cpu()).to(kFloat32).to_vector<float>();
  }

  bool shared_gpus_ = false;
  Device device_;
};

TEST_F(OverlapDevice, BucketsOnTheSideStreamMatchTheSameBucketsReducedAfterBackward) {
  for (const auto& [name, wire] : communicators()) {
    for (DType dtype : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(name + " wire " + dtype_name(wire) + ", model " + dtype_name(dtype));
      const auto& shared = shared_communicator_with(name, wire);
      auto& comm = *shared;
      const std::vector<float> overlapped = train(shared, dtype, true);
      const std::vector<float> after = train(shared, dtype, false);
      const std::vector<float> multi = train_multi_node(shared, dtype);
      const std::vector<float> start = fresh_model()->arena().params().to(Device::cpu()).to(dtype).to(kFloat32)
                                           .to_vector<float>();
      const bool same_everywhere =
          same_on_every_rank(comm, Tensor::from_vector(overlapped, {static_cast<std::int64_t>(overlapped.size())}));
      EXPECT_EQ(overlapped, after);
      // One rank: MultiNodeOptimizer communicates nothing (so no 16-bit wire either).
      if (comm.size() > 1) {
        EXPECT_EQ(multi, after);
      }
      EXPECT_NE(overlapped, start);  // it trained
      EXPECT_TRUE(same_everywhere);
    }
  }
}

TEST_F(OverlapDevice, TimesAreTheGpusAndCoverEveryBucket) {
  const auto& comm = shared_communicator_with("hierarchical", DPL_WITH_NCCL ? kBFloat16 : kFloat32);
  parallel::OverlapTimes times;
  static_cast<void>(train(comm, kFloat32, true, &times));
  auto model = fresh_model();
  parallel::GradientReducer reducer(*model, comm);
  reducer.set_overlap(buckets());
  const std::size_t n = reducer.buckets().size();
  EXPECT_GE(n, 2u);
  ASSERT_EQ(times.buckets.size(), n);
  double sum = 0.0;
  for (std::size_t k = 0; k < n; ++k) {
    EXPECT_GT(times.buckets[k].seconds, 0.0) << "bucket " << k;
    if (k > 0) {
      // One side stream: a bucket starts once the one before it has ended.
      EXPECT_GE(times.buckets[k].start, times.buckets[k - 1].start + times.buckets[k - 1].seconds - 1e-5)
          << "bucket " << k;
    }
    sum += times.buckets[k].seconds;
  }
  EXPECT_NEAR(times.total, sum, 1e-9);
  EXPECT_GE(times.exposed, 0.0);
  EXPECT_GE(times.hidden, 0.0);
  EXPECT_LE(times.hidden, times.total + 1e-9);
  // Exposed time runs from backward's end to the side stream's join, which is no earlier than the
  // last bucket's end (later by the host's latency where the bucket's last step was a host call).
  const auto& last = times.buckets.back();
  if (times.exposed > 0.0) {
    EXPECT_GE(times.backward_end + times.exposed, last.start + last.seconds - 1e-5);
  }
}

}  // namespace
}  // namespace dpl::test
