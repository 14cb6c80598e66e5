// One ResNet training step with the batch norms' statistics computed in the convolutions before
// them (ResNetOptions::fused_statistics on) against the same step with the batch norms' own pass
// over each convolution's output: the loss, the logits, every parameter's gradient and every
// running statistic, in every dtype, with the model's weights in that dtype (as
// optim::MixedPrecision keeps them) and channels-last images. Only float16 convolutions fuse the
// statistics (conv2d_with_sums); in bfloat16 and float32 the option must change nothing beyond
// cuDNN's run-to-run differences.
//
// Tolerances: the two ways differ in the variance's rounding (sum of squares against Welford's
// update) and, where cuDNN fuses the statistics, in the convolution's engine, whose 16-bit
// outputs may round differently; those differences pass through every layer of the step. Each
// gradient and statistic is compared as a whole: |fused - separate| / |separate| (L2 norms) at
// most 5e-2 in bfloat16, 2e-2 in float16 and 2e-3 in float32; the loss within 1e-2, 5e-3 and
// 1e-4 of itself. cuDNN's weight-gradient engines also add in a run-dependent order, so two
// separate-pass steps already differ in the last bits.
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class ResNetFusedStatisticsTest : public CudaTest {};

double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
  const std::vector<float> w = want.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    diff += (static_cast<double>(g[i]) - w[i]) * (static_cast<double>(g[i]) - w[i]);
    norm += static_cast<double>(w[i]) * w[i];
  }
  return std::sqrt(diff) / (std::sqrt(norm) + 1e-12);
}

TEST_F(ResNetFusedStatisticsTest, OneStepMatchesTheSeparatePass) {
  for (DType t : {kBFloat16, kFloat16, kFloat32}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == kBFloat16 ? 5e-2 : t == kFloat16 ? 2e-2 : 2e-3;
    const double loss_tol = t == kBFloat16 ? 1e-2 : t == kFloat16 ? 5e-3 : 1e-4;
    Generator data(seed_ + 1);
    const Tensor x = Tensor::uniform({8, 3, 64, 64}, -1.f, 1.f, data, gpu()).to_channels_last().to(t);
    std::vector<std::int32_t> y(8);
    for (auto& l : y) l = static_cast<std::int32_t>(data.below(10));
    const Tensor labels = Tensor::from_vector(y, {8}, gpu());
    std::shared_ptr<models::ResNet> nets[2];
    float losses[2] = {0, 0};
    Tensor logits[2];
    for (int fused = 0; fused < 2; ++fused) {
      Generator gen(seed_);
      models::ResNetOptions options;
      options.num_classes = 10;
      options.fused_statistics = fused == 1;
      nets[fused] = models::resnet("resnet18", options, gen);
      nets[fused]->to(gpu());
      nn::to_channels_last(*nets[fused]);
      std::unique_ptr<optim::Optimizer> opt =
          t == kFloat32 ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::SGD>(0.1f))
                        : optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), t);
      opt->setup(*nets[fused]);  // casts the weights to t
      nets[fused]->zero_grad();
      const Variable out = (*nets[fused])(Variable(x));
      logits[fused] = out.data();
      const Variable loss = softmax_cross_entropy(out, labels);
      loss.backward();
      losses[fused] = loss.data().to(kFloat32).to(Device::cpu()).at<float>({});
    }
    EXPECT_NEAR(losses[1], losses[0], loss_tol * std::fabs(losses[0])) << "loss";
    EXPECT_LE(relative_error(logits[1], logits[0]), tol) << "logits";
    const auto separate = nets[0]->named_parameters(), fused = nets[1]->named_parameters();
    ASSERT_EQ(separate.size(), fused.size());
    for (std::size_t i = 0; i < separate.size(); ++i)
      EXPECT_LE(relative_error(fused[i].second.grad(), separate[i].second.grad()), tol)
          << "gradient of " << separate[i].first;
    const auto separate_buffers = nets[0]->named_buffers(), fused_buffers = nets[1]->named_buffers();
    ASSERT_EQ(separate_buffers.size(), fused_buffers.size());
    for (std::size_t i = 0; i < separate_buffers.size(); ++i) {
      if (separate_buffers[i].second.data().dtype() != kFloat32) continue;  // num_batches_tracked: checked below
      EXPECT_LE(relative_error(fused_buffers[i].second.data(), separate_buffers[i].second.data()), tol)
          << separate_buffers[i].first;
    }
    EXPECT_EQ(nets[1]->named_buffers()[2].second.data().to(Device::cpu()).at<std::int64_t>({}), 1)
        << "num_batches_tracked of bn1";
  }
}

}  // namespace
}  // namespace dpl::test
