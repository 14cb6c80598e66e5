// CPU-vs-CUDA agreement of the losses and accuracy (op_agreement.hpp), and how bad labels on the
// GPU show; and in float32, bfloat16 and float16 (dtype_agreement.hpp): the pointwise losses and
// nll_loss with every reduction.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <cmath>

#include "dtype_agreement.hpp"
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, SoftmaxCrossEntropy) {
  const Tensor y = labels(32, 10);
  const Tensor yg = on_gpu(y);
  // The op reads its labels from the inputs' device, so each side gets its own copy.
  check("softmax_cross_entropy", {{32, 10}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y : yg);
  });
  const Tensor y2 = labels(7, 300);
  const Tensor y2g = on_gpu(y2);
  check("softmax_cross_entropy wide", {{7, 300}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y2 : y2g);
  });
}

// Device labels are not read back per call (it would stall every step); a bad one makes the
// loss NaN and never reads outside the logits. Host labels still throw.
TEST_F(AutogradTest, SoftmaxCrossEntropyBadLabelsOnTheGpuGiveNaN) {
  const Variable logits(rand({3, 4}).to(gpu()));
  const Tensor bad = Tensor::from_vector<std::int32_t>({0, 4, 1}, {3}, gpu());
  EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, bad).item()));
  const Tensor negative = Tensor::from_vector<std::int32_t>({0, -1, 1}, {3}, gpu());
  EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, negative).item()));
  const Tensor good = Tensor::from_vector<std::int32_t>({0, 3, 1}, {3}, gpu());
  EXPECT_TRUE(std::isfinite(softmax_cross_entropy(logits, good).item()));
  const Variable host_logits(Tensor::zeros({3, 4}));
  EXPECT_THROW(softmax_cross_entropy(host_logits, Tensor::from_vector<std::int32_t>({0, 4, 1}, {3})), Error);
}

TEST_F(AutogradTest, Accuracy) {
  const Tensor logits = rand({50, 10});
  const Tensor y = labels(50, 10);
  const float want = accuracy(Variable(logits), y).item();
  const Tensor got = accuracy(Variable(on_gpu(logits)), on_gpu(y));
  EXPECT_EQ(got.device(), gpu());
  EXPECT_EQ(got.item(), want);
}

TEST_F(AutogradTest, MseLossAndSmoothedCrossEntropy) {
  check("mse_loss", {{5, 6}, {5, 6}}, [](const auto& x) { return mse_loss(x[0], x[1]); });
  const Tensor y = labels(12, 10);
  const Tensor yg = on_gpu(y);
  check("softmax_cross_entropy smoothed", {{12, 10}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y : yg, 0.1f);
  });
}

using LossDtypes = DtypeAgreementTest;

TEST_F(LossDtypes, PointwiseLossesEveryReduction) {
  for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    const std::string red = " reduction " + std::to_string(static_cast<int>(r));
    check_dtypes("mse_loss" + red, {{5, 70}, {5, 70}}, [&](const auto& x) { return mse_loss(x[0], x[1], r); });
    check_dtypes("l1_loss" + red, {{5, 70}, {5, 70}}, [&](const auto& x) { return l1_loss(x[0], x[1], r); });
    check_dtypes("smooth_l1_loss" + red, {{5, 70}, {5, 70}},
                 [&](const auto& x) { return smooth_l1_loss(x[0], x[1], r, 0.5f); });
    const Tensor t = rand({5, 70}, 0.f, 1.f);
    check_dtypes(
        "binary_cross_entropy" + red, {{5, 70}},
        [&](const auto& x) { return binary_cross_entropy(x[0], beside(t.to(x[0].data().dtype()), x[0]), r); }, 0.05f,
        0.95f);
    const Tensor pw = rand({70}, 0.5f, 3.f);
    check_dtypes(
        "binary_cross_entropy_with_logits" + red, {{5, 70}},
        [&](const auto& x) {
          const DType dt = x[0].data().dtype();
          return binary_cross_entropy_with_logits(x[0], beside(t.to(dt), x[0]), r, beside(pw.to(dt), x[0]));
        },
        -3.f, 3.f);
  }
}

TEST_F(LossDtypes, NllLossInt32AndInt64LabelsWithIgnoreIndex) {
  std::vector<std::int64_t> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 3 ? -100 : static_cast<std::int64_t>(gen_.below(10));
  const Tensor l64 = Tensor::from_vector(v, {24});
  const Tensor l32 = Tensor::from_vector(std::vector<std::int32_t>(v.begin(), v.end()), {24});
  const Tensor l3 = Tensor::from_vector(v, {4, 6});
  for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    const std::string red = " reduction " + std::to_string(static_cast<int>(r));
    check_dtypes("nll_loss int64" + red, {{24, 10}},
                 [&](const auto& x) { return nll_loss(log_softmax(x[0]), beside(l64, x[0]), -100, r); });
    check_dtypes("nll_loss int32" + red, {{24, 10}},
                 [&](const auto& x) { return nll_loss(x[0], beside(l32, x[0]), -100, r); });
    check_dtypes("nll_loss (N, C, d)" + red, {{4, 10, 6}},
                 [&](const auto& x) { return nll_loss(x[0], beside(l3, x[0]), -100, r); });
  }
}

}  // namespace
}  // namespace dpl::test
