// Batch normalisation and its fusions: training against the batch statistics and finite
// differences, running statistics by hand, evaluation mode, channels-last against NCHW, 16-bit
// against float32, the errors for bad inputs, and the BatchNorm2d module.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::channels_last;
using test::expect_close;
using test::is_channels_last;
using test::gradcheck;
using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen) { return Tensor::normal(shape, 0.f, 1.f, gen); }

TEST(BatchNorm, TrainingGradcheckThroughTheBatchStatistics) {
  Generator gen(10);
  const Tensor x = randn({3, 2, 3, 2}, gen);
  const Tensor w = Tensor::uniform({2}, 0.5f, 1.5f, gen), b = randn({2}, gen);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true); },
                        {x, w, b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return batch_norm(v[0], Variable(), Variable(), Tensor(), Tensor(), true); },
                        {x}));
}

// Per channel: mean and biased/unbiased variance of x over (N, H, W), in double.
void channel_stats(const Tensor& x, std::int64_t c, double& mean, double& biased, double& unbiased) {
  std::vector<double> v;
  for (std::int64_t n = 0; n < x.size(0); ++n)
    for (std::int64_t h = 0; h < x.size(2); ++h)
      for (std::int64_t w = 0; w < x.size(3); ++w) v.push_back(x.at<float>({n, c, h, w}));
  mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double e : v) ss += (e - mean) * (e - mean);
  biased = ss / static_cast<double>(v.size());
  unbiased = ss / static_cast<double>(v.size() - 1);
}

TEST(BatchNorm, TrainingNormalisesWithBatchStatistics) {
  Generator gen(11);
  const Tensor x = Tensor::normal({4, 3, 5, 5}, 2.f, 3.f, gen);
  const Tensor w = Tensor::from_vector<float>({1.f, 2.f, 0.5f}, {3}), b = Tensor::from_vector<float>({0.f, 1.f, -1.f}, {3});
  const Tensor y = batch_norm(Variable(x), Variable(w), Variable(b), Tensor(), Tensor(), true).data();
  for (std::int64_t c = 0; c < 3; ++c) {
    double mean, var, unbiased;
    channel_stats(x, c, mean, var, unbiased);
    for (std::int64_t n = 0; n < 4; ++n) {
      const double expected = (x.at<float>({n, c, 1, 2}) - mean) / std::sqrt(var + 1e-5) * w.at<float>({c}) + b.at<float>({c});
      EXPECT_NEAR(y.at<float>({n, c, 1, 2}), expected, 1e-4);
    }
  }
}

// Hand computation of PyTorch's convention (no PyTorch here to produce golden values): after k
// training steps from (0, 1), running = (1 - m) running + m batch, with the unbiased variance.
TEST(BatchNorm, RunningStatisticsAfterSeveralStepsMatchAHandComputation) {
  Generator gen(12);
  nn::BatchNorm2d bn(3);
  std::vector<double> rm(3, 0.0), rv(3, 1.0);
  for (int step = 0; step < 4; ++step) {
    const Tensor x = Tensor::normal({2, 3, 4, 3}, static_cast<float>(step), 2.f, gen);
    bn(Variable(x));
    for (std::int64_t c = 0; c < 3; ++c) {
      double mean, biased, unbiased;
      channel_stats(x, c, mean, biased, unbiased);
      rm[c] = 0.9 * rm[c] + 0.1 * mean;
      rv[c] = 0.9 * rv[c] + 0.1 * unbiased;
    }
  }
  for (std::int64_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(bn.running_mean().at<float>({c}), rm[c], 1e-5);
    EXPECT_NEAR(bn.running_var().at<float>({c}), rv[c], 1e-5);
  }
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{4}));
}

// The count lives on the module's device and is read from the buffer each step, so a loaded value
// (copied into the buffer) is where counting resumes.
TEST(BatchNorm, CountsOnFromALoadedBatchCount) {
  Generator gen(18);
  nn::BatchNorm2d bn(2);
  bn.num_batches_tracked().fill_(41);
  bn(Variable(randn({2, 2, 2, 2}, gen)));
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{42}));
}

TEST(BatchNorm, EvaluationUsesTheRunningStatistics) {
  Generator gen(13);
  nn::BatchNorm2d bn(2);
  bn(Variable(Tensor::normal({4, 2, 3, 3}, 1.f, 2.f, gen)));
  bn.eval();
  const Tensor rm = bn.running_mean().clone(), rv = bn.running_var().clone();
  const Tensor x = randn({2, 2, 3, 3}, gen);
  NoGradGuard no_grad;
  const Tensor y = bn(Variable(x)).data();
  for (std::int64_t c = 0; c < 2; ++c)
    EXPECT_NEAR(y.at<float>({1, c, 2, 0}),
                (x.at<float>({1, c, 2, 0}) - rm.at<float>({c})) / std::sqrt(rv.at<float>({c}) + 1e-5f), 1e-5);
  EXPECT_EQ(bn.running_mean().to_vector<float>(), rm.to_vector<float>());
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{1}));
}

TEST(BatchNorm, EvaluationGradcheckWithFrozenStatisticsInBothFormats) {
  // Fine-tuning with frozen statistics: gradients flow through the per-channel affine map that
  // the running statistics define, to the input, the weight and the bias.
  Generator gen(14);
  const Tensor x = randn({3, 2, 3, 2}, gen);
  const Tensor w = Tensor::uniform({2}, 0.5f, 1.5f, gen), b = randn({2}, gen);
  const Tensor rm = randn({2}, gen), rv = Tensor::uniform({2}, 0.5f, 2.f, gen);
  const auto eval_bn = [&](const Vars& v) { return batch_norm(v[0], v[1], v[2], rm, rv, false); };
  EXPECT_TRUE(gradcheck(eval_bn, {x, w, b}));
  EXPECT_TRUE(gradcheck(eval_bn, {x.to_channels_last(), w, b}));
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return batch_norm(v[0], Variable(), Variable(), rm, rv, false); }, {x}));

  // By hand: gx = gy * w / sqrt(rv + eps), gw = sum(gy * xhat), gb = sum(gy), with gy = 1.
  Variable vx(x, true), vw(w, true), vb(b, true);
  sum(batch_norm(vx, vw, vb, rm, rv, false)).backward();
  for (std::int64_t c = 0; c < 2; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(rv.at<float>({c})) + 1e-5);
    double xhat_sum = 0;
    for (std::int64_t n = 0; n < 3; ++n)
      for (std::int64_t h = 0; h < 3; ++h)
        for (std::int64_t k = 0; k < 2; ++k) {
          xhat_sum += (x.at<float>({n, c, h, k}) - rm.at<float>({c})) * invstd;
          EXPECT_NEAR(vx.grad().at<float>({n, c, h, k}), w.at<float>({c}) * invstd, 1e-5);
        }
    EXPECT_NEAR(vw.grad().at<float>({c}), xhat_sum, 1e-4);
    EXPECT_NEAR(vb.grad().at<float>({c}), 18.0, 1e-4);
  }
}

TEST(BatchNorm, ModuleRegistersParametersAndBuffers) {
  nn::BatchNorm2d bn(4);
  std::vector<std::string> names;
  for (const auto& [name, v] : bn.named_buffers()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.num_parameters(), 8);
  EXPECT_EQ(nn::BatchNorm2d(4, 1e-5, 0.1, false).num_parameters(), 0);
}

// Also where size-1 dimensions leave the order open (a 1x1 image, as the last stage of a ResNet on
// small images; one channel): the output keeps the input's NHWC strides.
TEST(BatchNorm, ChannelsLastMatchesNchw) {
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{4, 3, 1, 1}, Shape{2, 1, 4, 5}}) {
    SCOPED_TRACE(shape_str(shape));
    const std::int64_t c = shape[1];
    Generator gen(14);
    const Tensor x = randn(shape, gen);
    Variable a(x.clone(), true), b(channels_last(x), true);
    Variable w(Tensor::ones({c}), true);
    const Variable ya = batch_norm(a, w, Variable(Tensor::zeros({c})), Tensor(), Tensor(), true);
    const Variable yb = batch_norm(b, w, Variable(Tensor::zeros({c})), Tensor(), Tensor(), true);
    EXPECT_TRUE(is_channels_last(yb.data()));
    EXPECT_EQ(yb.data().strides(), b.data().strides());
    expect_close(yb.data(), ya.data(), 1e-5f, 1e-5f);
    const Variable weights(randn(shape, gen));
    sum(mul(ya, weights)).backward();
    sum(mul(yb, weights)).backward();
    expect_close(b.grad(), a.grad(), 1e-5f, 1e-4f);
  }
}

// As for pooling: float32 math on the rounded inputs, so one rounding of the output apart.
TEST(BatchNorm, SixteenBitMatchesFloat32WithinOneRounding) {
  Generator gen(15);
  for (DType t : {kBFloat16, kFloat16}) {
    const float rtol = t == kBFloat16 ? 1.f / 256 : 1.f / 2048;
    const Tensor x16 = randn({4, 3, 4, 4}, gen).to(t);
    const Tensor y16 = batch_norm(Variable(x16), Variable(), Variable(), Tensor(), Tensor(), true).data();
    const Tensor y32 = batch_norm(Variable(x16.to(kFloat32)), Variable(), Variable(), Tensor(), Tensor(), true).data();
    EXPECT_EQ(y16.dtype(), t);
    expect_close(y16, y32, 1e-5f, rtol);
  }
}

// 16-bit scale and shift (a model cast for mixed precision) are widened for the arithmetic: the
// output is the float32-parameter one, and each parameter's gradient is the float32 gradient
// rounded once to the parameter's dtype.
TEST(BatchNorm, SixteenBitAffineParametersActAsTheirFloat32Values) {
  Generator gen(18);
  for (DType t : {kBFloat16, kFloat16}) {
    const Tensor x = randn({4, 3, 2, 2}, gen).to(t);
    const Tensor w = randn({3}, gen).to(t).to(kFloat32), b = randn({3}, gen).to(t).to(kFloat32);
    const Variable w16(w.to(t), true), b16(b.to(t), true), w32(w, true), b32(b, true);
    const Variable y16 = batch_norm(Variable(x), w16, b16, Tensor(), Tensor(), true);
    const Variable y32 = batch_norm(Variable(x), w32, b32, Tensor(), Tensor(), true);
    EXPECT_EQ(y16.dtype(), t);
    EXPECT_EQ(y16.data().to(kFloat32).to_vector<float>(), y32.data().to(kFloat32).to_vector<float>()) << t;
    const Tensor weights = randn({4, 3, 2, 2}, gen).to(t);
    sum(mul(y16, Variable(weights))).backward();
    sum(mul(y32, Variable(weights))).backward();
    ASSERT_EQ(w16.grad().dtype(), t);
    ASSERT_EQ(b16.grad().dtype(), t);
    EXPECT_EQ(w16.grad().to(kFloat32).to_vector<float>(), w32.grad().to(t).to(kFloat32).to_vector<float>()) << t;
    EXPECT_EQ(b16.grad().to(kFloat32).to_vector<float>(), b32.grad().to(t).to(kFloat32).to_vector<float>()) << t;
  }
}

TEST(BatchNorm, FusedVariantsComposeOnTheCpu) {
  Generator gen(16);
  const Tensor x = randn({2, 3, 3, 3}, gen), z = randn({2, 3, 3, 3}, gen);
  const Tensor plain = batch_norm(Variable(x), Variable(), Variable(), Tensor(), Tensor(), true).data();
  const Tensor r = batch_norm_relu(Variable(x), Variable(), Variable(), Tensor(), Tensor(), true).data();
  const Tensor ar = batch_norm_add_relu(Variable(x), Variable(z), Variable(), Variable(), Tensor(), Tensor(), true).data();
  const auto p = plain.to_vector<float>(), vr = r.to_vector<float>(), var = ar.to_vector<float>(), vz = z.to_vector<float>();
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_FLOAT_EQ(vr[i], std::max(p[i], 0.f));
    EXPECT_FLOAT_EQ(var[i], std::max(p[i] + vz[i], 0.f));
  }
}

// The stem's batch norm + ReLU + max pooling composes the two ops on the CPU: the same output and
// gradients as max_pool2d(batch_norm_relu(...)), and the pooling's own checks, named for the op.
TEST(BatchNorm, ReluMaxPoolComposesOnTheCpu) {
  Generator gen(17);
  const Tensor x = randn({2, 3, 7, 6}, gen), w = randn({3}, gen), b = randn({3}, gen), up = randn({2, 3, 4, 3}, gen);
  Tensor grads[2][3], outs[2];
  for (int fused = 0; fused < 2; ++fused) {
    Variable xv(x.clone(), true), wv(w.clone(), true), bv(b.clone(), true);
    const Variable y = fused == 1 ? batch_norm_relu_max_pool2d(xv, wv, bv, Tensor(), Tensor(), true, 3, 2, 1)
                                  : max_pool2d(batch_norm_relu(xv, wv, bv, Tensor(), Tensor(), true), 3, 2, 1);
    outs[fused] = y.data();
    sum(mul(y, Variable(up))).backward();
    grads[fused][0] = xv.grad();
    grads[fused][1] = wv.grad();
    grads[fused][2] = bv.grad();
  }
  ASSERT_EQ(outs[1].shape(), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(outs[1].to_vector<float>(), outs[0].to_vector<float>());
  for (int k = 0; k < 3; ++k) EXPECT_EQ(grads[1][k].to_vector<float>(), grads[0][k].to_vector<float>()) << k;
  EXPECT_THAT(test::error_message([&] {
                batch_norm_relu_max_pool2d(Variable(x), Variable(w), Variable(b), Tensor(), Tensor(), true, 3, 2, 2);
              }),
              HasSubstr("batch_norm_relu_max_pool2d: expected padding between 0 and half the kernel (1x1), got 2x2"));
  EXPECT_THAT(test::error_message([&] {
                batch_norm_relu_max_pool2d(Variable(randn({2, 3, 4}, gen)), Variable(w), Variable(b), Tensor(),
                                           Tensor(), true, 3);
              }),
              HasSubstr("batch_norm_relu_max_pool2d"));
}

// The module's stem forward is forward, the ReLU and the pooling, and counts a training batch as
// forward does (two training calls here: the stem forward and the composition's).
TEST(BatchNorm, ModuleReluMaxPoolMatchesTheComposition) {
  Generator gen(19);
  const Variable x(randn({2, 3, 8, 8}, gen));
  nn::BatchNorm2d bn(3);
  const nn::MaxPool2dOptions pool = nn::MaxPool2dOptions(3).stride(2).padding(1);
  for (bool training : {true, false}) {
    bn.train(training);
    const auto fused = bn.forward_relu_max_pool(x, pool).data().to_vector<float>();
    const auto composed = max_pool2d(bn.forward_relu(x), 3, 2, 1).data().to_vector<float>();
    EXPECT_EQ(fused.size(), std::size_t{2 * 3 * 4 * 4});
    EXPECT_EQ(fused, composed) << (training ? "training" : "evaluation");
  }
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{2}));
}

// The module's fused forwards are its forward followed by the ReLU (and the residual), and count
// the batch like forward does, in training and in evaluation mode.
TEST(BatchNorm, ModuleFusedForwardsMatchForwardAndCountBatches) {
  Generator gen(18);
  const Variable x(randn({2, 3, 3, 3}, gen)), z(randn({2, 3, 3, 3}, gen));
  nn::BatchNorm2d bn(3);
  for (bool training : {true, false}) {
    bn.train(training);
    const auto plain = bn(x).data().to_vector<float>();
    const auto r = bn.forward_relu(x).data().to_vector<float>();
    const auto ar = bn.forward_add_relu(x, z).data().to_vector<float>();
    const auto vz = z.data().to_vector<float>();
    for (std::size_t i = 0; i < plain.size(); ++i) {
      // Evaluation normalises with running statistics that the training calls just moved, the
      // same for all three calls; training normalises with the batch's own.
      EXPECT_FLOAT_EQ(r[i], std::max(plain[i], 0.f));
      EXPECT_FLOAT_EQ(ar[i], std::max(plain[i] + vz[i], 0.f));
    }
  }
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{3}));
}

// The ops count a batch in num_batches_tracked exactly when they update the running statistics:
// each training-mode variant once a call, in both memory formats; evaluation, undefined running
// statistics and an undefined counter count nothing.
TEST(BatchNorm, OpsCountTheBatchWhereTheyUpdateTheRunningStatistics) {
  Generator gen(23);
  const Tensor nchw = randn({2, 3, 4, 4}, gen);
  for (const Tensor& t : {nchw, channels_last(nchw)}) {
    const Variable x(t), z(t);
    const Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
    const Tensor count = Tensor::zeros({}, TensorOptions(kInt64));
    const auto counted = [&] { return count.to_vector<std::int64_t>().at(0); };
    batch_norm(x, Variable(), Variable(), mean, var, true, 0.1, 1e-5, nullptr, count);
    EXPECT_EQ(counted(), 1);
    batch_norm_relu(x, Variable(), Variable(), mean, var, true, 0.1, 1e-5, nullptr, count);
    batch_norm_add_relu(x, z, Variable(), Variable(), mean, var, true, 0.1, 1e-5, nullptr, count);
    batch_norm_relu_max_pool2d(x, Variable(), Variable(), mean, var, true, Size2d(3), Size2d(2), Size2d(1), 0.1, 1e-5,
                               nullptr, count);
    EXPECT_EQ(counted(), 4) << "one count per training-mode call";
    batch_norm(x, Variable(), Variable(), mean, var, false, 0.1, 1e-5, nullptr, count);
    batch_norm(x, Variable(), Variable(), Tensor(), Tensor(), true, 0.1, 1e-5, nullptr, count);
    batch_norm(x, Variable(), Variable(), mean, var, true);
    EXPECT_EQ(counted(), 4) << "evaluation, no running statistics and no counter count nothing";
  }
}

TEST(BatchNorm, BadInputsSayWhatWasExpected) {
  const Variable x(Tensor::ones({2, 3, 2, 2}));
  DPL_EXPECT_ERROR(batch_norm(Variable(Tensor::ones({2, 3})), Variable(), Variable(), Tensor(), Tensor(), true),
                   HasSubstr("expected an input (N, C, H, W) with 4 dimensions, got shape (2, 3)"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(Tensor::ones({4})), Variable(Tensor::zeros({4})), Tensor(), Tensor(), true),
                   HasSubstr("expected a weight of shape (3,) for an input with 3 channels"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(), Variable(), Tensor::zeros({3}, TensorOptions(kBFloat16)),
                              Tensor::ones({3}), true),
                   HasSubstr("expected running_mean of dtype float32"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(Tensor::ones({3}, kBFloat16)), Variable(Tensor::zeros({3})), Tensor(),
                              Tensor(), true),
                   HasSubstr("expected weight and bias of one dtype, got bfloat16 and float32"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(), Variable(), Tensor(), Tensor(), false),
                   HasSubstr("evaluation mode needs running_mean and running_var"));
  DPL_EXPECT_ERROR(batch_norm(Variable(Tensor::ones({1, 3, 1, 1})), Variable(), Variable(), Tensor(), Tensor(), true),
                   HasSubstr("at least 2 values per channel"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(), Variable(), Tensor::zeros({3}), Tensor::ones({3}), true, 0.1, 1e-5,
                              nullptr, Tensor::zeros({2}, TensorOptions(kInt64))),
                   HasSubstr("expected num_batches_tracked of one int64 element, got int64 of shape (2,)"));
  DPL_EXPECT_ERROR(batch_norm(x, Variable(), Variable(), Tensor::zeros({3}), Tensor::ones({3}), true, 0.1, 1e-5,
                              nullptr, Tensor::zeros({})),
                   HasSubstr("expected num_batches_tracked of one int64 element, got float32 of shape ()"));
  DPL_EXPECT_ERROR(nn::BatchNorm2d(0), HasSubstr("expected num_features >= 1"));
}

}  // namespace
}  // namespace dpl
