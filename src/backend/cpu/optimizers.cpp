// Optimizer updates on the CPU: one fused pass over the whole parameter arena.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

constexpr float kSmallestNormal = std::numeric_limits<float>::min();

// The values of a step from the device copy when there is one (see UpdateSource), and whether
// the flag says to skip.
template <typename Hyper>
Hyper hyper_of(const Hyper& given, const UpdateSource& source) {
  if (source.hyper == nullptr) return given;
  DPL_CHECK(source.hyper->numel() * static_cast<std::int64_t>(sizeof(float)) ==
                static_cast<std::int64_t>(sizeof(Hyper)),
            "optimizer update: expected ", sizeof(Hyper) / sizeof(float), " step values, got ", source.hyper->numel());
  Hyper h;
  std::memcpy(&h, source.hyper->data<float>(), sizeof(Hyper));
  return h;
}
bool skipped(const UpdateSource& source) { return source.skip != nullptr && source.skip->data<float>()[0] != 0.f; }

void sgd_update_cpu(Tensor& param, const Tensor& grad, const SgdHyper& given, const UpdateSource& source) {
  if (skipped(source)) return;
  const SgdHyper h = hyper_of(given, source);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  const std::int64_t n = param.numel();
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) p[i] -= h.lr * (g[i] + h.weight_decay * p[i]);
}

void momentum_update_cpu(Tensor& param, const Tensor& grad, Tensor& velocity, const MomentumHyper& given,
                         const UpdateSource& source) {
  if (skipped(source)) return;
  const MomentumHyper h = hyper_of(given, source);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = velocity.data<float>();
  const std::int64_t n = param.numel();
  // Chainer's MomentumSGD: v = momentum*v - lr*g; p += v.
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    v[i] = h.momentum * v[i] - h.lr * (g[i] + h.weight_decay * p[i]);
    p[i] += v[i];
  }
}

void adam_update_cpu(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& given,
                     const UpdateSource& source) {
  if (skipped(source)) return;
  const AdamHyper h = hyper_of(given, source);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const std::int64_t n = param.numel();
  const float one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
  // Chainer's Adam: m += (1-b1)(g-m); v += (1-b2)(g^2-v); p -= lr_t * m / (sqrt(v) + eps).
  // This file's square root is a reciprocal-square-root estimate refined by a Newton step
  // (src/CMakeLists.txt), and the estimate of a subnormal v is Inf: the step made a NaN of the
  // parameter (a squared gradient below 1e-38 is enough). Below the smallest normal float v is
  // raised to it; its square root, 1.1e-19, is lost in any eps above 1e-12 as the true one is.
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + h.weight_decay * p[i];
    pm[i] += one_minus_b1 * (gi - pm[i]);
    pv[i] += one_minus_b2 * (gi * gi - pv[i]);
    p[i] -= h.lr_t * pm[i] / (std::sqrt(std::max(pv[i], kSmallestNormal)) + h.eps);
  }
}

}  // namespace

DPL_REGISTER_KERNEL(sgd_update, kCpu, sgd_update_cpu);
DPL_REGISTER_KERNEL(momentum_update, kCpu, momentum_update_cpu);
DPL_REGISTER_KERNEL(adam_update, kCpu, adam_update_cpu);

}  // namespace dpl::backend::cpu
