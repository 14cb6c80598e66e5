// One ResNet training step with the batch norms' statistics computed in the convolutions before
// them (ResNetOptions::fused_statistics on) against the same step with the batch norms' own pass
// over each convolution's output: the loss, the logits, every parameter's gradient and every
// running statistic, in every dtype, with the model's weights in that dtype (as
// optim::MixedPrecision keeps them) and channels-last images, for a ResNet-18 (3x3 convolutions,
// which fuse on cuDNN in float16 only) and a ResNet-50 (whose 1x1 stride-1 convolutions fuse on
// CUTLASS's sm_90a product in both 16-bit dtypes where the build has it). In float32 the option
// must change nothing beyond cuDNN's run-to-run differences.
//
// Tolerances: the two ways differ in the variance's rounding (plain sums of squares against the
// separate pass's shifted sums) and in the convolution's kernel (cuDNN's fused engine, CUTLASS's
// product), whose 16-bit outputs may round differently; those differences pass through every
// layer of the step, and with the few values per channel of a small batch (32 in the last stage) a
// batch norm's backward magnifies them. So the 16-bit steps are judged against a float32 step of
// the same weights: the fused step's distance to it (|got - ref| / |ref|, L2 norms, per gradient,
// statistic, the logits and the loss) must stay within twice the separate pass's own distance plus
// a floor (one H100 run measured 1.95 times for one gradient). The floor is 2e-3 for the ResNet-18
// and 1e-2 for the ResNet-50, whose bfloat16 step lands anywhere from 3e-4 to 3.5e-2 from float32
// on the loss, depending on the seed, in either way (H100 runs: separate 2.6e-4 and fused 6.7e-3
// at one seed, separate 3.5e-2 and fused 2.3e-2 at another), so twice the one's distance alone
// says little about the other. In float32 nothing fuses and the two steps agree within 2e-3
// (cuDNN's weight-gradient engines add in a run-dependent order, so two steps already differ in
// the last bits).
//
// Each step also counts the residual batch norms whose backward reductions the next block's first
// 1x1 convolution computed (OutputGradReductions): in a ResNet-50 every bottleneck's output but the
// last feeds the next block's stride-1 1x1 conv1, whose data gradient is the last to arrive (the
// engine runs the block's add, and any strided downsample convolution, before its conv1), so 15
// hand-offs a step where the CUTLASS products run on 16-bit data, none in float32 without TF32 and
// none in a ResNet-18 (no 1x1 stride-1 convolutions).
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops/support.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class ResNetFusedStatisticsTest : public CudaTest {};

// What one training step of a ResNet leaves behind, as float32 host copies.
struct StepResult {
  std::vector<float> loss, logits;
  std::vector<std::pair<std::string, std::vector<float>>> grads, buffers;
  std::uint64_t handoffs = 0;  // batch-norm reductions computed by the convolution after it
  std::size_t kept_bytes = 0;  // device memory the forward pass left allocated for backward
};

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
}

double distance(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / (std::sqrt(norm) + 1e-12);
}

StepResult one_step(const std::string& arch, DType t, models::ResNetOptions options, std::uint64_t seed,
                    const Device& gpu) {
  Generator data(seed + 1);
  const Tensor x = Tensor::uniform({8, 3, 64, 64}, -1.f, 1.f, data, gpu).to_channels_last().to(t);
  std::vector<std::int32_t> y(8);
  for (auto& l : y) l = static_cast<std::int32_t>(data.below(10));
  const Tensor labels = Tensor::from_vector(y, {8}, gpu);
  Generator gen(seed);
  options.num_classes = 10;
  std::shared_ptr<models::ResNet> net = models::resnet(arch, options, gen);
  net->to(gpu);
  nn::to_channels_last(*net);
  std::unique_ptr<optim::Optimizer> opt =
      t == kFloat32 ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::SGD>(0.1f))
                    : optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), t);
  opt->setup(*net);  // casts the weights to t
  net->zero_grad();
  StepResult r;
  const std::size_t allocated = cuda::memory_stats(gpu.index).current;
  const Variable out = (*net)(Variable(x));
  const Variable loss = softmax_cross_entropy(out, labels);
  r.kept_bytes = cuda::memory_stats(gpu.index).current - allocated;
  const std::uint64_t before = ops_detail::output_grad_reductions_filled();
  loss.backward();
  r.handoffs = ops_detail::output_grad_reductions_filled() - before;
  r.loss = host(loss.data().reshape({1}));
  r.logits = host(out.data());
  for (const auto& [name, p] : net->named_parameters()) r.grads.emplace_back(name, host(p.grad()));
  for (const auto& [name, b] : net->named_buffers())
    if (b.data().dtype() == kFloat32) r.buffers.emplace_back(name, host(b.data()));  // not num_batches_tracked
  for (const auto& [name, b] : net->named_buffers())
    if (b.data().dtype() == kInt64) {
      EXPECT_EQ(b.data().to(Device::cpu()).at<std::int64_t>({}), 1) << name;
    }
  return r;
}

StepResult one_step(const std::string& arch, DType t, bool fused, std::uint64_t seed, const Device& gpu) {
  models::ResNetOptions options;
  options.fused_statistics = fused;
  return one_step(arch, t, options, seed, gpu);
}

// Every quantity of `got` within twice `base`'s distance to `ref` plus `tol`, or within `tol` of
// `base` when ref is null.
void expect_close(const StepResult& got, const StepResult& base, const StepResult* ref, double tol) {
  auto check = [&](const std::vector<float>& f, const std::vector<float>& s, const std::vector<float>* r,
                   const std::string& what) {
    if (r == nullptr) {
      EXPECT_LE(distance(f, s), tol) << what;
      return;
    }
    const double own = distance(s, *r), off = distance(f, *r);
    if (what == "loss" || what == "logits")
      std::cout << "[ step ] " << what << ": " << off << ", against " << own << " from float32\n";
    EXPECT_LE(off, 2.0 * own + tol) << what << ": the step it is judged against is " << own << " from float32";
  };
  check(got.loss, base.loss, ref != nullptr ? &ref->loss : nullptr, "loss");
  check(got.logits, base.logits, ref != nullptr ? &ref->logits : nullptr, "logits");
  ASSERT_EQ(got.grads.size(), base.grads.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i)
    check(got.grads[i].second, base.grads[i].second, ref != nullptr ? &ref->grads[i].second : nullptr,
          "gradient of " + base.grads[i].first);
  ASSERT_EQ(got.buffers.size(), base.buffers.size());
  for (std::size_t i = 0; i < got.buffers.size(); ++i)
    check(got.buffers[i].second, base.buffers[i].second, ref != nullptr ? &ref->buffers[i].second : nullptr,
          base.buffers[i].first);
}

TEST_F(ResNetFusedStatisticsTest, OneStepMatchesTheSeparatePass) {
  for (const std::string arch : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(arch);
    auto expect_handoffs = [&](const StepResult& r, DType t) {
      const std::uint64_t want = arch == "resnet50" && t != kFloat32 && cutlass_products_run() ? 15u : 0u;
      EXPECT_EQ(r.handoffs, want) << "batch-norm reductions computed by the next convolution in one step";
    };
    const StepResult ref = one_step(arch, kFloat32, false, seed_, gpu());
    expect_handoffs(ref, kFloat32);
    {
      SCOPED_TRACE("float32");
      const StepResult fused = one_step(arch, kFloat32, true, seed_, gpu());
      expect_handoffs(fused, kFloat32);
      expect_close(fused, ref, nullptr, 2e-3);
    }
    for (DType t : {kBFloat16, kFloat16}) {
      SCOPED_TRACE(dtype_name(t));
      const StepResult separate = one_step(arch, t, false, seed_, gpu());
      const StepResult fused = one_step(arch, t, true, seed_, gpu());
      expect_handoffs(separate, t);
      expect_handoffs(fused, t);
      expect_close(fused, separate, &ref, arch == "resnet50" ? 1e-2 : 2e-3);
    }
  }
}

// The step with every residual block checkpointed (ResNetOptions::checkpoint_blocks: forward keeps
// each block's input only and backward computes the block again) against the same step without
// it, on the default path (fused statistics on). The recomputation runs the same kernels on the
// same inputs, so the two differ only where cuDNN's weight-gradient engines add in a run-dependent
// order: in float32 within 2e-3 of each other (as two plain steps), in the 16-bit dtypes judged
// against the float32 step as above, with the same floors. The running statistics and
// every num_batches_tracked (one_step's check) count the batch once, not again in the recomputation;
// no residual batch norm hands its backward reductions to the next block's conv1 (a block
// boundary is a checkpoint boundary, docs/models.md), its own pass computes them; and what
// forward leaves allocated for backward is at most half the plain step's (a block's input against
// every batch norm's input and output in it).
TEST_F(ResNetFusedStatisticsTest, CheckpointedBlocksGiveThePlainStep) {
  models::ResNetOptions checkpointed;
  checkpointed.checkpoint_blocks = true;
  for (const std::string arch : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(arch);
    const StepResult ref = one_step(arch, kFloat32, true, seed_, gpu());
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      SCOPED_TRACE(dtype_name(t));
      const StepResult plain = t == kFloat32 ? ref : one_step(arch, t, true, seed_, gpu());
      const StepResult redone = one_step(arch, t, checkpointed, seed_, gpu());
      EXPECT_EQ(redone.handoffs, 0u) << "batch-norm reductions computed by the next convolution";
      EXPECT_LT(2 * redone.kept_bytes, plain.kept_bytes)
          << "bytes kept for backward: checkpointed " << redone.kept_bytes << ", plain " << plain.kept_bytes;
      if (t == kFloat32)
        expect_close(redone, plain, nullptr, 2e-3);
      else
        expect_close(redone, plain, &ref, arch == "resnet50" ? 1e-2 : 2e-3);
    }
  }
}

}  // namespace
}  // namespace dpl::test
