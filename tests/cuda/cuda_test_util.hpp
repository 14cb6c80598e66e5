#pragma once
// Shared pieces of the GPU tests: a fixture that skips without a GPU, fresh random inputs with
// a printed seed, NaN-poisoned outputs, and CPU-vs-CUDA comparisons with stated tolerances.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/settings.hpp"
#include "dpl/dpl.hpp"

/// Skips a test whose reference is the CPU's convolution, batch norm or pooling: those need
/// oneDNN, an optional library, so a build without it has nothing to compare the GPU with.
#define DPL_SKIP_WITHOUT_CPU_REFERENCE() \
  if (!DPL_WITH_DNNL) GTEST_SKIP() << "the CPU reference needs oneDNN, which this build lacks"

namespace dpl::test {

inline Device gpu() { return Device::cuda(0); }

/// Base fixture: skips the test when no GPU answers (CI) and gives each test a fresh seed,
/// printed on failure and fixed by DPL_TEST_SEED to replay a failure.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU available";
    if (const char* s = std::getenv("DPL_TEST_SEED"); s != nullptr && *s != '\0') {
      seed_ = std::strtoull(s, nullptr, 10);
    } else {
      seed_ = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }
    gen_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "DPL_TEST_SEED=" + std::to_string(seed_));
  }
  void TearDown() override { trace_.reset(); }

 public:  // also used by free helper functions of the tests
  /// Uniform in [lo, hi) on the host.
  Tensor rand(const Shape& s, float lo = -1.f, float hi = 1.f) { return Tensor::uniform(s, lo, hi, gen_); }
  /// Random int32 labels in [0, classes) on the host.
  Tensor labels(std::int64_t n, std::int64_t classes) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<std::int32_t>(gen_.below(static_cast<std::uint64_t>(classes)));
    return Tensor::from_vector(v, {n});
  }

  Generator gen_{0};
  std::uint64_t seed_ = 0;

 private:
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

/// A device tensor of the given shape filled with NaN, so that any element a kernel fails to
/// write shows up in the comparison.
inline Tensor poisoned(const Shape& s, Device d = gpu()) { return Tensor::full(s, std::nan(""), d); }

/// A copy of t on the GPU.
inline Tensor on_gpu(const Tensor& t) { return t.to(gpu()); }

/// Expects |got - want| <= atol + rtol * |want| + extra[i] element by element (NaN never passes;
/// extra may be empty), and reports how many elements fail and the worst one.
inline void expect_close_with(const Tensor& got, const Tensor& want, float rtol, float atol,
                              const std::vector<double>& extra, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to(kFloat32).to_vector<float>(), w = want.to(kFloat32).to_vector<float>();
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = atol + rtol * std::fabs(static_cast<double>(w[i])) + (extra.empty() ? 0.0 : extra[i]);
    const double diff = std::fabs(static_cast<double>(g[i]) - static_cast<double>(w[i]));
    if (!(diff <= tol)) {
      ++bad;
      const double excess = std::isnan(diff) ? 1e300 : diff - tol;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << g.size() << " elements differ beyond rtol=" << rtol
                     << " atol=" << atol << "; worst at flat index " << worst << ": cuda " << g[worst] << " vs cpu "
                     << w[worst];
}

/// Expects |got - want| <= atol + rtol * |want| element by element (NaN never passes), and
/// reports how many elements fail and the worst one.
inline void expect_close(const Tensor& got, const Tensor& want, float rtol, float atol, const std::string& what) {
  expect_close_with(got, want, rtol, atol, {}, what);
}

/// As expect_close, for a 16-bit gradient accumulated onto `prior`. cuDNN rounds its own result to
/// the 16-bit type before adding the prior; the host rounds the float32 sum once. Where the two
/// nearly cancel, the results differ by up to two roundings at the operands' scale, not the
/// result's, so each element also gets 2 * eps * (|prior| + |want - prior|), eps the type's
/// machine epsilon (2^-7 for bfloat16, 2^-10 for float16; 0 for float32).
inline void expect_close_accumulated(const Tensor& got, const Tensor& want, const Tensor& prior, float rtol,
                                     float atol, const std::string& what) {
  const DType dt = got.dtype();
  const double eps = dt == kBFloat16 ? 1.0 / 128 : dt == kFloat16 ? 1.0 / 1024 : 0.0;
  const std::vector<float> w = want.to(kFloat32).to_vector<float>(), p = prior.to(kFloat32).to_vector<float>();
  std::vector<double> extra(w.size());
  for (std::size_t i = 0; i < w.size(); ++i)
    extra[i] = 2.0 * eps * (std::fabs(static_cast<double>(p[i])) + std::fabs(static_cast<double>(w[i]) - p[i]));
  expect_close_with(got, want, rtol, atol, extra, what);
}

/// Whether this build and GPU 0 run dpl's CUTLASS products (src/backend/cuda/cutlass): built with
/// them, DPL_CUTLASS not 0, and a device of compute capability 9.0 (sm_90a code runs there only).
/// Where they run, the cases they take must come back fused.
inline bool cutlass_products_run() {
  int major = 0, minor = 0;
  return DPL_WITH_CUTLASS_SM90 && settings().cutlass &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess && major == 9 &&
         minor == 0;
}

/// dpl::cuda::allow_tf32() set for a scope (float32 products take the CUTLASS paths only while it
/// is on), and the setting before restored when the scope ends, however it ends.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool on) : was_(cuda::allow_tf32()) { cuda::set_allow_tf32(on); }
  ~Tf32Scope() { cuda::set_allow_tf32(was_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool was_;
};

/// The unit roundoff of a 16-bit dtype: 2^-8 (bfloat16), 2^-11 (float16).
inline double unit_roundoff(DType t) { return t == kBFloat16 ? 1.0 / 256 : 1.0 / 2048; }

/// The relative L2 distance of got from want.
inline double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double err2 = 0.0, want2 = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    want2 += want[i] * want[i];
  }
  return std::sqrt(err2 / want2);
}

/// For a kernel that adds exactly multiplied 16-bit terms in float32 and rounds once to got's
/// dtype: expects each element within u|want| + 2^-14 mag of the exact sum want (mag: the sum of
/// its terms' magnitudes; u: unit_roundoff), and with l2 on, the relative L2 error below 2u, which
/// a missed or doubled part of a sum would not stay under.
inline void expect_near_exact_sum(const Tensor& got, const std::vector<double>& want, const std::vector<double>& mag,
                                  bool l2, const std::string& what) {
  const std::vector<float> f = got.to(kFloat32).to_vector<float>();
  const std::vector<double> g(f.begin(), f.end());
  ASSERT_EQ(g.size(), want.size()) << what;
  const double u = unit_roundoff(got.dtype());
  std::vector<float> want_f(want.begin(), want.end());
  std::vector<double> extra(mag.size());
  for (std::size_t i = 0; i < mag.size(); ++i) extra[i] = mag[i] / 16384;
  expect_close_with(got.to(Device::cpu()), Tensor::from_vector(want_f, got.shape()), static_cast<float>(u), 1e-6f,
                    extra, what);
  if (l2) {
    EXPECT_LE(relative_l2(g, want), 2 * u) << what << ": relative L2 error";
  }
}

/// Expects bit-for-bit equal int32 or float contents.
template <typename T>
void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<T> g = got.to_vector<T>(), w = want.to_vector<T>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(g[i] == w[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i];
      return;
    }
  }
}

}  // namespace dpl::test
