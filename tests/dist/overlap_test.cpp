// Allreduce overlapped with backward, on every host communicator: the same parameters as the same
// buckets reduced after backward (bit for bit), the same as one whole-arena allreduce where the
// sum is order-free (two ranks), 16-bit models through MixedPrecision's master gradients, the
// phases it records, and a NaN on one rank still named.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/autograd/ops.hpp"
#include "dpl/nn.hpp"
#include "dpl/optim/mixed_precision.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {

constexpr int kSteps = 4;
constexpr std::int64_t kFeatures = 16, kUnits = 48, kClasses = 5, kBatch = 12;

// Small buckets, so that the 16-48-48-5 MLP's arena (~3.5k floats) splits into several.
parallel::OverlapOptions small_buckets() { return {true, 4096, 512}; }

std::unique_ptr<nn::MLP> fresh_model() {
  Generator gen(7);  // the same weights on every rank
  return std::make_unique<nn::MLP>(kUnits, kFeatures, kClasses, gen);
}

std::function<Variable()> loss_of(nn::Module& model, comm::Communicator& comm, int step) {
  const Shard s = batch_shard(comm, 100 + static_cast<std::uint64_t>(step), kBatch * comm.size(), kFeatures, kClasses);
  return [&model, s] { return softmax_cross_entropy(model(Variable(s.x)), s.y); };
}

// kSteps updates through a MultiNodeOptimizer with the given overlap; the parameters after.
std::vector<float> train_with(const std::shared_ptr<comm::Communicator>& shared,
                              const parallel::OverlapOptions& overlap, profile::PhaseTimer* timer_out = nullptr) {
  comm::Communicator& comm = *shared;
  auto model = fresh_model();
  parallel::MultiNodeOptimizer opt(std::make_unique<optim::SGD>(0.1f), shared);
  opt.set_overlap(overlap);
  opt.setup(*model);
  for (int step = 0; step < kSteps; ++step) opt.update(loss_of(*model, comm, step));
  if (timer_out != nullptr) *timer_out = opt.timer();
  return model->arena().params().to_vector<float>();
}

// The same buckets reduced after backward, driven by hand through a GradientReducer.
std::vector<float> train_buckets_after_backward(const std::shared_ptr<comm::Communicator>& shared,
                                                const parallel::OverlapOptions& overlap) {
  comm::Communicator& comm = *shared;
  auto model = fresh_model();
  parallel::GradientReducer reducer(*model, shared);
  reducer.set_overlap(overlap);
  reducer.broadcast_parameters();
  optim::SGD opt(0.1f);
  opt.setup(*model);
  for (int step = 0; step < kSteps; ++step) {
    model->zero_grad();
    loss_of(*model, comm, step)().backward();  // hooks fire, but nothing is armed yet
    reducer.begin_backward();
    reducer.finish_backward();  // every bucket, in bucket order, now
    opt.update();
  }
  return model->arena().params().to_vector<float>();
}

TEST(Overlap, MatchesTheSameBucketsReducedAfterBackwardOnEveryCommunicator) {
  for (const auto& name : host_communicator_names()) {
    if (name == "pure_nccl") continue;  // its host path is naive's
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    profile::PhaseTimer timer;
    const std::vector<float> overlapped = train_with(shared, small_buckets(), &timer);
    const std::vector<float> after = train_buckets_after_backward(shared, small_buckets());
    const std::vector<float> whole = train_with(shared, parallel::OverlapOptions{});
    const bool same_everywhere = same_on_every_rank(comm, Tensor::from_vector(overlapped, {static_cast<std::int64_t>(overlapped.size())}));
    EXPECT_EQ(overlapped, after) << name;
    // With two ranks each element's sum has one order whatever the message size, so one
    // whole-arena allreduce gives the same bits; with more, MPI may associate differently.
    if (comm.size() == 2) {
      EXPECT_EQ(overlapped, whole) << name;
    }
    EXPECT_TRUE(same_everywhere) << name;
    for (const char* phase : {"compute", "allreduce", "optimize", "allreduce/hidden", "allreduce/total",
                              "allreduce/bucket0", "allreduce/bucket1"})
      EXPECT_NE(timer.find(phase), nullptr) << name << ": no phase " << phase;
    if (const auto* total = timer.find("allreduce/total")) {
      EXPECT_EQ(total->samples.size(), static_cast<std::size_t>(kSteps)) << name;
    }
    // The node-shared communicators report their steps per bucket too, inside the bucket's time.
    if (name == "hierarchical" || name == "two_dimensional") {
      const auto* bucket = timer.find("allreduce/bucket0");
      const auto* reduce = timer.find("allreduce/bucket0/intra_reduce");
      ASSERT_NE(reduce, nullptr) << name;
      ASSERT_NE(bucket, nullptr) << name;
      ASSERT_EQ(reduce->samples.size(), bucket->samples.size()) << name;
      for (std::size_t i = 0; i < bucket->samples.size(); ++i) {
        const profile::PhaseSample& b = bucket->samples[i];
        EXPECT_DOUBLE_EQ(reduce->samples[i].start, b.start) << name;
        EXPECT_LE(reduce->samples[i].seconds, b.seconds + 1e-9) << name;
      }
    }
  }
}

// A 16-bit model under MixedPrecision (float16 with loss scaling that backs off and grows within
// kSteps): kSteps updates, overlapped, or with the same buckets reduced after backward by hand;
// the parameters after, widened to float32.
std::vector<float> train_mixed(const std::shared_ptr<comm::Communicator>& shared, DType dtype,
                               const parallel::OverlapOptions& overlap, bool buckets_by_hand = false) {
  comm::Communicator& comm = *shared;
  auto model = fresh_model();
  auto mixed = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), dtype, {4096.0, 2.0, 0.5, 2});
  auto loss_at = [&](int step) {
    const Shard s = batch_shard(comm, 200 + static_cast<std::uint64_t>(step), kBatch * comm.size(), kFeatures,
                                kClasses);
    return [&model, s, dtype] { return softmax_cross_entropy((*model)(Variable(s.x.to(dtype))), s.y); };
  };
  if (buckets_by_hand) {
    parallel::GradientReducer reducer(*model, shared);
    reducer.set_overlap(overlap);
    reducer.broadcast_parameters();
    mixed->setup(*model);
    reducer.broadcast_parameters();
    for (int step = 0; step < kSteps; ++step) {
      model->zero_grad();
      mixed->backward(loss_at(step)());  // hooks fire, but nothing is armed yet
      reducer.begin_backward(nullptr, mixed->gradient_ranges());
      reducer.finish_backward();  // each bucket filled from the 16-bit gradients, then reduced
      mixed->update();
    }
  } else {
    parallel::MultiNodeOptimizer opt(std::move(mixed), shared);
    opt.set_overlap(overlap);
    opt.setup(*model);
    for (int step = 0; step < kSteps; ++step) opt.update(loss_at(step));
  }
  return model->arena().params().to(kFloat32).to_vector<float>();
}

TEST(Overlap, SixteenBitModelsMatchTheirNonOverlappedTrainingOnEveryCommunicator) {
  for (DType dtype : {kBFloat16, kFloat16})
    for (const auto& name : host_communicator_names()) {
      if (name == "pure_nccl") continue;  // its host path is naive's
      SCOPED_TRACE(name + " " + dtype_name(dtype));
      const auto& shared = shared_communicator(name);
      auto& comm = *shared;
      const std::vector<float> overlapped = train_mixed(shared, dtype, small_buckets());
      const std::vector<float> after = train_mixed(shared, dtype, small_buckets(), /*buckets_by_hand=*/true);
      const std::vector<float> whole = train_mixed(shared, dtype, parallel::OverlapOptions{});
      const std::vector<float> start = fresh_model()->arena().params().to(dtype).to(kFloat32).to_vector<float>();
      EXPECT_EQ(overlapped, after);
      if (comm.size() == 2) {
        EXPECT_EQ(overlapped, whole);
      }
      EXPECT_NE(overlapped, start);  // it trained
      EXPECT_TRUE(same_on_every_rank(
          comm, Tensor::from_vector(overlapped, {static_cast<std::int64_t>(overlapped.size())})));
    }
}

TEST(Overlap, BucketsStartInBucketOrderEvenWhenBackwardSkipsParameters) {
  // A loss that uses only the output layer's bias: backward finishes one parameter and never
  // reaches the others, whose buckets must still be reduced (zeros), in order, on every rank.
  const auto& shared = shared_communicator("naive");
  auto& comm = *shared;
  auto model = fresh_model();
  parallel::GradientReducer reducer(*model, shared);
  reducer.set_overlap(small_buckets());
  reducer.broadcast_parameters();
  const auto params = model->named_parameters();
  model->zero_grad();
  reducer.begin_backward();
  const Variable& last = params.back().second;
  (sum(last) * static_cast<float>(comm.rank() + 1)).backward();
  const parallel::OverlapTimes times = reducer.finish_backward();
  EXPECT_EQ(times.buckets.size(), reducer.buckets().size());
  EXPECT_GE(times.total, 0.0);
  // The mean of rank+1 over the ranks, in the last parameter; zeros elsewhere.
  const float want = static_cast<float>(comm.size() + 1) / 2.f;
  for (float g : last.grad().to_vector<float>()) EXPECT_FLOAT_EQ(g, want);
  for (std::size_t j = 0; j + 1 < params.size(); ++j)
    for (float g : params[j].second.grad().to_vector<float>()) EXPECT_EQ(g, 0.f) << params[j].first;
}

TEST(Overlap, NonFiniteGradientOnOneRankStillStopsEveryRankNamingIt) {
  const auto& shared = shared_communicator("hierarchical");
  auto& comm = *shared;
  auto model = fresh_model();
  parallel::MultiNodeOptimizer opt(std::make_unique<optim::SGD>(0.1f), shared);
  opt.set_overlap(small_buckets());
  opt.setup(*model);
  const Shard s = batch_shard(comm, 5, kBatch * comm.size(), kFeatures, kClasses);
  Tensor x = s.x.clone();
  if (comm.rank() == comm.size() - 1) x.set<float>({0, 0}, std::numeric_limits<float>::quiet_NaN());
  const std::string last = std::to_string(comm.size() - 1);
  DPL_EXPECT_ERROR(opt.update([&] { return softmax_cross_entropy((*model)(Variable(x)), s.y); }),
                   ::testing::HasSubstr("on rank(s) " + last));
}

TEST(Overlap, RefusesWhatItCannotOverlap) {
  const auto& comm = shared_communicator("naive");
  auto model = fresh_model();
  parallel::GradientReducer reducer(*model, comm);
  DPL_EXPECT_ERROR(reducer.begin_backward(), ::testing::HasSubstr("overlap is off"));
  DPL_EXPECT_ERROR(reducer.set_overlap({true, 0, 1}), ::testing::HasSubstr("bucket sizes >= 1 byte"));
  DPL_EXPECT_ERROR(reducer.finish_backward(), ::testing::HasSubstr("no backward pass is armed"));
  // A 16-bit arena is reduced through an optimizer's float32 gradient ranges, never directly.
  auto half = fresh_model();
  auto mixed = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kBFloat16);
  mixed->setup(*half);
  parallel::GradientReducer half_reducer(*half, comm);
  half_reducer.set_overlap(small_buckets());
  DPL_EXPECT_ERROR(half_reducer.begin_backward(), ::testing::HasSubstr("optim::MixedPrecision"));
  half_reducer.check_overlap_supported("test", /*optimizer_prepares_ranges=*/true);
}

}  // namespace
}  // namespace dpl::test
