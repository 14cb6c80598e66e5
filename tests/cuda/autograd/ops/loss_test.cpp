// CPU-vs-CUDA agreement of the losses and accuracy (op_agreement.hpp), and how bad labels on the
// GPU show; and in float32, bfloat16 and float16 (dtype_agreement.hpp): the pointwise losses and
// nll_loss with every reduction; linear_cross_entropy against the CPU, against the unfused loss
// in every dtype, and recorded in a CUDA graph.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

// --- linear_cross_entropy: the head and the loss a chunk of rows at a time ------------------------

LinearCrossEntropyOptions chunked(std::int64_t rows, const Variable& bias = Variable(), float smoothing = 0.f) {
  LinearCrossEntropyOptions o;
  o.chunk_rows = rows;
  o.bias = bias;
  o.label_smoothing = smoothing;
  return o;
}

float largest_abs(const Tensor& t) {
  float m = 0.f;
  for (float v : t.to(kFloat32).to_vector<float>()) m = std::max(m, std::fabs(v));
  return m;
}

TEST_F(AutogradTest, LinearCrossEntropyAgreesWithTheCpu) {
  // 37 rows in chunks of 8 (the last of 5), of 1 and of the chosen size (one here); a vocabulary
  // of 70 (not a multiple of the kernels' packs), width 24, a bias and label smoothing. atol 1e-4:
  // the gradients are matrix products over 70 classes and 37 rows.
  const Tensor y = labels(37, 70), yg = on_gpu(y);
  for (const std::int64_t rows : {8, 1, 0}) {
    check("linear_cross_entropy chunk_rows " + std::to_string(rows), {{37, 24}, {70, 24}, {70}},
          [&](const auto& v) {
            return linear_cross_entropy(v[0], v[1], v[0].device().is_cpu() ? y : yg, chunked(rows, v[2], 0.1f));
          },
          1e-4f, 1e-4f);
  }
}

TEST_F(AutogradTest, LinearCrossEntropyMatchesTheUnfusedLossOnTheGpuInEveryDtype) {
  // Against softmax_cross_entropy(linear(x, w, b)) on the GPU, upstream gradient 2.5: float32 to
  // the products' summation order (1e-5 of each result's largest element); bfloat16 and float16
  // within 4 units in the last place of it, as on the CPU (tests/unit/autograd/ops/loss_test.cpp):
  // the logits' gradient is rounded per chunk's mean instead of the whole mean's. 300 rows, a
  // vocabulary of 1000, chunks of 64 (the last of 44) and of the chosen size.
  const std::int64_t n = 300, c = 64, v = 1000;
  const Tensor x0 = rand({n, c}), w0 = rand({v, c}, -0.5f, 0.5f), b0 = rand({v}, -0.5f, 0.5f);
  const Tensor y = on_gpu(labels(n, v));
  for (const DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const float rtol = dt == kFloat32 ? 1e-5f : 4.f * (dt == kBFloat16 ? 1.f / 128 : 1.f / 1024);
    const auto run = [&](std::int64_t rows) {  // rows < 0: the unfused loss
      Variable x(on_gpu(x0.to(dt)), true), w(on_gpu(w0.to(dt)), true), b(on_gpu(b0.to(dt)), true);
      const Variable loss =
          rows < 0 ? softmax_cross_entropy(linear(x, w, b), y) : linear_cross_entropy(x, w, y, chunked(rows, b));
      (loss * 2.5f).backward();
      return std::vector<Tensor>{loss.data(), x.grad(), w.grad(), b.grad()};
    };
    const std::vector<Tensor> want = run(-1);
    for (const std::int64_t rows : {64, 0}) {
      const std::vector<Tensor> got = run(rows);
      const char* names[] = {"loss", "grad of x", "grad of weight", "grad of bias"};
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), dt);
        expect_close(got[i], want[i], 0.f, rtol * largest_abs(want[i]),
                     std::string(names[i]) + ", chunk_rows " + std::to_string(rows));
      }
    }
  }
}

// Device labels are not read back (as softmax_cross_entropy's): a bad one makes the loss NaN.
TEST_F(AutogradTest, LinearCrossEntropyBadLabelsOnTheGpuGiveNaN) {
  const Variable x(on_gpu(rand({3, 4}))), w(on_gpu(rand({5, 4})));
  EXPECT_TRUE(std::isnan(linear_cross_entropy(x, w, Tensor::from_vector<std::int32_t>({0, 5, 1}, {3}, gpu())).item()));
  EXPECT_TRUE(std::isfinite(linear_cross_entropy(x, w, Tensor::from_vector<std::int32_t>({0, 4, 1}, {3}, gpu())).item()));
}

TEST_F(AutogradTest, LinearCrossEntropyRecordsInACudaGraphAndReplaysExactly) {
  // Forward and backward never read a value back to the host (the upstream gradient is applied on
  // the device), so a CUDA graph records them; a replay gives the ordinary call's loss and
  // gradients bit for bit.
  Variable x(on_gpu(rand({20, 16})), true), w(on_gpu(rand({30, 16})), true);
  const Tensor y = on_gpu(labels(20, 30));
  const Variable ordinary = linear_cross_entropy(x, w, y, chunked(7));
  (ordinary * 2.5f).backward();
  const Tensor want_loss = ordinary.data().to(Device::cpu()), want_gx = x.grad().to(Device::cpu()),
               want_gw = w.grad().to(Device::cpu());
  Tensor loss = Tensor::zeros({}, TensorOptions(kFloat32, gpu()));
  cuda::Graph graph;
  graph.capture(0, [&] {
    const Variable l = linear_cross_entropy(x, w, y, chunked(7));
    (l * 2.5f).backward();  // adds to the gradients made above: buffers from outside the recording
    loss.copy_(l.data());
  });
  for (Tensor g : {x.grad(), w.grad()}) g.fill_(0.0);  // handles: the fill reaches the gradients
  graph.replay();
  expect_equal<float>(loss.to(Device::cpu()), want_loss, "loss");
  expect_equal<float>(x.grad().to(Device::cpu()), want_gx, "grad of x");
  expect_equal<float>(w.grad().to(Device::cpu()), want_gw, "grad of weight");
}

}  // namespace
}  // namespace dpl::test
