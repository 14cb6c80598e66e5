// CPU-vs-CUDA agreement of the kernels of the shape and indexing ops and of the batched matrix
// product (src/backend/kernels.hpp: index_select, index_add, gather, scatter_add, gemm_batched), in
// float32, bfloat16 and float16, with int64 and int32 indices. Device outputs start as NaN so that
// an element a kernel does not write fails the comparison.
//
// Tolerances: the forward indexing kernels move values, so they agree exactly. The scatter-adds
// sum in float32 on both sides (atomics on the GPU, index order on the CPU) and round once, so a
// float32 result may differ by the order of a few additions (rtol 1e-6, atol 1e-6) and a 16-bit
// one by one 16-bit ulp where the float32 sums straddle a rounding boundary. Matrix products:
// atol 1e-6*K + rtol 1e-5 in float32 (as kernels_test.cpp), one 16-bit ulp + 1e-5*K in 16 bits.
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class ShapeKernelsTest : public CudaTest {};

constexpr DType kTypes[] = {kFloat32, kBFloat16, kFloat16};

float ulp_of(DType t) { return t == kBFloat16 ? 1.f / 128.f : t == kFloat16 ? 1.f / 1024.f : 1e-6f; }

// n random indices in [0, extent) of dtype it (int64 or int32), with repeats when n > extent.
Tensor random_index(CudaTest& t, const Shape& s, std::int64_t extent, DType it) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& x : v) x = static_cast<std::int64_t>(t.gen_.below(static_cast<std::uint64_t>(extent)));
  if (it == kInt64) return Tensor::from_vector(v, s);
  std::vector<std::int32_t> narrow(v.begin(), v.end());
  return Tensor::from_vector(narrow, s);
}

std::string what(const char* kernel, DType dt, DType it, float beta = 0.f) {
  return std::string(kernel) + " " + dtype_name(dt) + " index " + dtype_name(it) + " beta " + std::to_string(beta);
}

TEST_F(ShapeKernelsTest, IndexSelectAndIndexAddEveryDtype) {
  // (3,5,16) along dimensions 0 and 1 has rows of 80 and 16 elements, which index_select copies
  // 16 bytes at a time; (3,7,5) one element at a time.
  for (const Shape& x_shape : {Shape{3, 7, 5}, Shape{3, 5, 16}}) {
    for (DType dt : kTypes)
      for (DType it : {kInt64, kInt32})
        for (std::int64_t dim : {0, 1, 2}) {
          const Tensor x = rand(x_shape).to(dt);
          const Tensor index = random_index(*this, {11}, x_shape[static_cast<std::size_t>(dim)], it);
          Shape out_shape = x_shape;
          out_shape[static_cast<std::size_t>(dim)] = 11;
          Tensor want = Tensor::empty(out_shape, dt);
          backend::index_select(x, dim, index, want);
          Tensor got = poisoned(out_shape).to(dt);
          backend::index_select(on_gpu(x), dim, on_gpu(index), got);
          expect_close(got.to(kFloat32), want.to(kFloat32), 0.f, 0.f, what("index_select", dt, it));

          const Tensor g = rand(out_shape).to(dt);
          for (float beta : {0.f, 1.f})
            for (std::int64_t skip : {std::int64_t{-1}, std::int64_t{1}}) {
              const Tensor prior = rand(x_shape).to(dt);
              Tensor want_g = prior.clone();
              backend::index_add(index, dim, skip, g, beta, want_g);
              Tensor got_g = beta == 0.f ? poisoned(x_shape).to(dt) : on_gpu(prior);
              backend::index_add(on_gpu(index), dim, skip, on_gpu(g), beta, got_g);
              expect_close(got_g.to(kFloat32), want_g.to(kFloat32), ulp_of(dt), 1e-6f,
                           what("index_add", dt, it, beta) + " skip " + std::to_string(skip));
            }
        }
  }
}

TEST_F(ShapeKernelsTest, GatherAndScatterAddEveryDtype) {
  const Shape x_shape{4, 6, 5};
  const Shape index_shape{3, 9, 5};  // smaller than x except at dim 1, so positions repeat
  for (DType dt : kTypes)
    for (DType it : {kInt64, kInt32}) {
      const Tensor x = rand(x_shape).to(dt);
      const Tensor index = random_index(*this, index_shape, 6, it);
      Tensor want = Tensor::empty(index_shape, dt);
      backend::gather(x, 1, index, want);
      Tensor got = poisoned(index_shape).to(dt);
      backend::gather(on_gpu(x), 1, on_gpu(index), got);
      expect_close(got.to(kFloat32), want.to(kFloat32), 0.f, 0.f, what("gather", dt, it));

      const Tensor g = rand(index_shape).to(dt);
      for (float beta : {0.f, 1.f}) {
        const Tensor prior = rand(x_shape).to(dt);
        Tensor want_g = prior.clone();
        backend::scatter_add(index, 1, g, beta, want_g);
        Tensor got_g = beta == 0.f ? poisoned(x_shape).to(dt) : on_gpu(prior);
        backend::scatter_add(on_gpu(index), 1, on_gpu(g), beta, got_g);
        expect_close(got_g.to(kFloat32), want_g.to(kFloat32), ulp_of(dt), 1e-6f, what("scatter_add", dt, it, beta));
      }
    }
}

TEST_F(ShapeKernelsTest, OutOfRangeIndicesGiveNaNAndNoGradientOnTheDevice) {
  const Tensor x = on_gpu(rand({3, 2}));
  const Tensor index = on_gpu(Tensor::from_vector<std::int64_t>({0, 3, -1}, {3}));
  Tensor out = poisoned({3, 2});
  backend::index_select(x, 0, index, out);
  const std::vector<float> v = out.to_vector<float>();
  EXPECT_FALSE(std::isnan(v[0]));
  for (std::size_t i = 2; i < 6; ++i) EXPECT_TRUE(std::isnan(v[i])) << i;
  Tensor gx = on_gpu(Tensor::zeros({3, 2}));
  backend::index_add(index, 0, -1, on_gpu(Tensor::ones({3, 2})), 0.f, gx);
  EXPECT_EQ(gx.to_vector<float>(), (std::vector<float>{1, 1, 0, 0, 0, 0}));

  // Rows of 16 elements: whole 16-byte packs of NaN for the rows out of range.
  for (DType dt : kTypes) {
    Tensor wide = poisoned({3, 16}).to(dt);
    backend::index_select(on_gpu(rand({3, 16}).to(dt)), 0, index, wide);
    const std::vector<float> w = wide.to(kFloat32).to_vector<float>();
    for (std::size_t i = 0; i < 16; ++i) EXPECT_FALSE(std::isnan(w[i])) << dtype_name(dt) << " " << i;
    for (std::size_t i = 16; i < 48; ++i) EXPECT_TRUE(std::isnan(w[i])) << dtype_name(dt) << " " << i;
  }
}

TEST_F(ShapeKernelsTest, GemmBatchedAllTransposesBetasAndDtypes) {
  const std::int64_t batch = 5, m = 13, k = 21, n = 9;
  for (DType dt : kTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.f, 1.f}) {
          const Tensor a = rand(ta ? Shape{batch, k, m} : Shape{batch, m, k}).to(dt);
          const Tensor b = rand(tb ? Shape{batch, n, k} : Shape{batch, k, n}).to(dt);
          const Tensor c0 = rand({batch, m, n}).to(dt);
          Tensor want = c0.clone();
          backend::gemm_batched(ta, tb, 0.75f, a, b, beta, want);
          Tensor got = beta == 0.f ? poisoned({batch, m, n}).to(dt) : on_gpu(c0);
          backend::gemm_batched(ta, tb, 0.75f, on_gpu(a), on_gpu(b), beta, got);
          const float rtol = dt == kFloat32 ? 1e-5f : ulp_of(dt);
          expect_close(got.to(kFloat32), want.to(kFloat32), rtol, (dt == kFloat32 ? 1e-6f : 1e-5f) * k,
                       std::string("gemm_batched ") + dtype_name(dt) + " ta=" + std::to_string(ta) +
                           " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        }
}

}  // namespace
}  // namespace dpl::test
