// The CPU kernels of the shape and indexing ops and of the batched matrix product
// (src/backend/kernels.hpp): index_add and scatter_add with beta 0 and 1, repeated indices and
// the skipped padding row, and gemm_batched against one gemm per matrix for every transpose.
// Values are small integers, so every sum is exact and the comparisons are exact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/dpl.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;

TEST(ShapeKernels, IndexAddSumsRepeatedIndicesSkipsOneAndHonoursBeta) {
  const Tensor index = Tensor::from_vector<std::int64_t>({2, 0, 2, 1}, {4});
  // g (2, 4, 1) scattered along dim 1 into gx (2, 3, 1).
  const Tensor g = Tensor::from_vector<float>({1, 2, 3, 4, 10, 20, 30, 40}, {2, 4, 1});
  Tensor gx = Tensor::full({2, 3, 1}, 100.0);
  backend::index_add(index, 1, -1, g, 0.f, gx);
  EXPECT_THAT(gx.to_vector<float>(), ElementsAre(2, 4, 4, 20, 40, 40));
  backend::index_add(index, 1, 2, g, 1.f, gx);  // row 2 skipped, the rest added
  EXPECT_THAT(gx.to_vector<float>(), ElementsAre(4, 8, 4, 40, 80, 40));
  const Tensor index32 = Tensor::from_vector<std::int32_t>({2, 0, 2, 1}, {4});
  Tensor h = Tensor::zeros({2, 3, 1}, kBFloat16);
  backend::index_add(index32, 1, -1, g.to(kBFloat16), 0.f, h);
  EXPECT_THAT(h.to(kFloat32).to_vector<float>(), ElementsAre(2, 4, 4, 20, 40, 40));
}

TEST(ShapeKernels, ScatterAddIsTheTransposeOfGather) {
  const Tensor x = Tensor::arange(0, 6).reshape({2, 3});
  const Tensor index = Tensor::from_vector<std::int64_t>({2, 2, 0, 1}, {2, 2});
  Tensor out = Tensor::empty({2, 2});
  backend::gather(x, 1, index, out);
  EXPECT_THAT(out.to_vector<float>(), ElementsAre(2, 2, 3, 4));
  Tensor gx = Tensor::full({2, 3}, 7.0);
  backend::scatter_add(index, 1, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}), 0.f, gx);
  EXPECT_THAT(gx.to_vector<float>(), ElementsAre(0, 0, 3, 3, 4, 0));
  backend::scatter_add(index, 1, Tensor::from_vector<float>({1, 1, 1, 1}, {2, 2}), 1.f, gx);
  EXPECT_THAT(gx.to_vector<float>(), ElementsAre(0, 0, 5, 4, 5, 0));
}

TEST(ShapeKernels, GemmBatchedIsOneGemmPerMatrix) {
  Generator gen(9);
  const auto ints = [&](const Shape& s) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(s)));
    for (float& x : v) x = static_cast<float>(static_cast<int>(gen.below(7)) - 3);
    return Tensor::from_vector(v, s);
  };
  const std::int64_t batch = 3, m = 4, k = 5, n = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f}) {
        const Tensor a = ints(ta ? Shape{batch, k, m} : Shape{batch, m, k});
        const Tensor b = ints(tb ? Shape{batch, n, k} : Shape{batch, k, n});
        const Tensor c0 = ints({batch, m, n});
        Tensor got = c0.clone();
        backend::gemm_batched(ta, tb, 0.5f, a, b, beta, got);
        for (std::int64_t i = 0; i < batch; ++i) {
          const auto matrix = [i](const Tensor& t) { return t.narrow(0, i, 1).reshape({t.size(1), t.size(2)}); };
          Tensor want = matrix(c0).clone();
          backend::gemm(ta, tb, 0.5f, matrix(a), matrix(b), beta, want);
          EXPECT_EQ(matrix(got).to_vector<float>(), want.to_vector<float>())
              << "ta=" << ta << " tb=" << tb << " beta=" << beta << " matrix " << i;
        }
      }
}

}  // namespace
}  // namespace dpl
