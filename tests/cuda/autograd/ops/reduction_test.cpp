// CPU-vs-CUDA agreement of the reductions (op_agreement.hpp): sum, mean, softmax, log_softmax;
// and in float32, bfloat16 and float16 (dtype_agreement.hpp): sum and mean along dimensions,
// max and min with their gradients, argmax and argmin (equal indices).
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <cmath>

#include "dtype_agreement.hpp"
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, SumAndMean) {
  check("sum", {{10, 10}}, [](const auto& x) { return sum(x[0]); });
  check("mean", {{33, 7}}, [](const auto& x) { return mean(x[0]); });
  check("mean of a large tensor", {{1000, 1000}}, [](const auto& x) { return mean(x[0]); }, 1e-5f, 1e-6f);
}

TEST_F(AutogradTest, SoftmaxAndLogSoftmax) {
  for (const Shape& s : {Shape{9}, Shape{6, 10}, Shape{2, 3, 300}}) {
    check("softmax", {s}, [](const auto& x) { return softmax(x[0]); });
    check("log_softmax", {s}, [](const auto& x) { return log_softmax(x[0]); });
  }
  const Tensor logits = rand({4, 3, 17});
  EXPECT_EQ(argmax(Variable(on_gpu(logits))).to(Device::cpu()).to_vector<std::int64_t>(),
            argmax(Variable(logits)).to_vector<std::int64_t>());
}

using ReductionDtypes = DtypeAgreementTest;

TEST_F(ReductionDtypes, SumAndMeanAlongDimensions) {
  const Shape s{3, 4, 5, 70};
  for (bool keep : {false, true}) {
    check_dtypes("sum inner", {s}, [&](const auto& x) { return sum(x[0], {-1}, keep); });
    check_dtypes("sum middle", {s}, [&](const auto& x) { return sum(x[0], {1}, keep); });
    check_dtypes("mean outer", {s}, [&](const auto& x) { return mean(x[0], {0}, keep); });
    check_dtypes("sum two runs", {s}, [&](const auto& x) { return sum(x[0], {0, 2}, keep); });
    check_dtypes("mean adjacent", {s}, [&](const auto& x) { return mean(x[0], {1, 2}, keep); });
  }
}

TEST_F(ReductionDtypes, MaxMinAndTheirIndices) {
  // 72 along the last dimension: the GPU reads 16 bytes per lane; 70 one element at a time.
  for (const Shape& s : {Shape{3, 4, 70}, Shape{3, 4, 72}}) {
    for (std::int64_t d : {0, 1, 2}) {
      const std::string dim = " over dimension " + std::to_string(d) + " of " + shape_str(s);
      check_dtypes("max" + dim, {s}, [&](const auto& x) { return max(x[0], d).values; });
      check_dtypes("min" + dim, {s}, [&](const auto& x) { return min(x[0], d, true).values; });
      for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
        // Rounded to 16 bits, values tie: both devices must pick the first.
        const Tensor x = rand(s).to(dt);
        expect_equal<std::int64_t>(argmax(Variable(x.to(gpu())), d).to(Device::cpu()), argmax(Variable(x), d),
                                   "argmax" + dim + " in " + dtype_name(dt));
        expect_equal<std::int64_t>(argmin(Variable(x.to(gpu())), d).to(Device::cpu()), argmin(Variable(x), d),
                                   "argmin" + dim + " in " + dtype_name(dt));
      }
    }
  }
}

// NaN wins over every number and the first of equal values wins, whichever lane of the GPU's
// 16-byte reads meets them first.
TEST_F(ReductionDtypes, MaxAlongTheLastDimensionPicksTheFirstExtremeAndNaN) {
  using backend::ReduceKind;
  const float nan = std::nan("");
  std::vector<float> v(2 * 32, 0.25f);
  v[5] = v[17] = v[30] = 2.f;   // row 0: ties, the first at 5
  v[32 + 3] = 1.f;
  v[32 + 20] = nan;             // row 1: a NaN after a larger number
  v[32 + 27] = nan;
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor x = Tensor::from_vector(v, {2, 32}).to(dt);
    for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kMin}) {
      Tensor want = Tensor::empty({2, 1}, dt), got = Tensor::empty({2, 1}, TensorOptions(dt, gpu()));
      Tensor wi = Tensor::empty({2, 1}, kInt64), gi = Tensor::empty({2, 1}, TensorOptions(kInt64, gpu()));
      backend::reduce_dim(kind, 1.f, x.reshape({2, 32, 1}), want, &wi);
      backend::reduce_dim(kind, 1.f, x.to(gpu()).reshape({2, 32, 1}), got, &gi);
      const std::string what = std::string(kind == ReduceKind::kMax ? "max" : "min") + " in " + dtype_name(dt);
      expect_equal<std::int64_t>(gi.to(Device::cpu()), wi, "indices of " + what);
      const std::vector<float> g = got.to(Device::cpu()).to(kFloat32).to_vector<float>();
      const std::vector<float> w = want.to(kFloat32).to_vector<float>();
      for (std::size_t k = 0; k < g.size(); ++k)
        EXPECT_TRUE(g[k] == w[k] || (std::isnan(g[k]) && std::isnan(w[k]))) << what << " row " << k;
    }
    const std::vector<std::int64_t> expected_max = {5, 20};
    Tensor gi = Tensor::empty({2, 1}, TensorOptions(kInt64, gpu()));
    Tensor got = Tensor::empty({2, 1}, TensorOptions(dt, gpu()));
    backend::reduce_dim(ReduceKind::kMax, 1.f, x.to(gpu()).reshape({2, 32, 1}), got, &gi);
    EXPECT_EQ(gi.to(Device::cpu()).to_vector<std::int64_t>(), expected_max) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace dpl::test
