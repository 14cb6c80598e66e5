// Optimizer updates on the CPU: one fused pass over the whole parameter arena.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

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

// The clamp keeps the square root's input normal, as in Adam above.
inline float root(float x) { return std::sqrt(std::max(x, kSmallestNormal)); }

void adamw_update_cpu(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& given,
                      const UpdateSource& source) {
  if (skipped(source)) return;
  const AdamWHyper h = hyper_of(given, source);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const std::int64_t n = param.numel();
  const float decay = 1.f - h.lr * h.weight_decay, one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
  // torch.optim.AdamW's single-tensor path, operation for operation.
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float pi = p[i] * decay;
    pm[i] = pm[i] * h.beta1 + one_minus_b1 * g[i];
    pv[i] = pv[i] * h.beta2 + one_minus_b2 * g[i] * g[i];
    p[i] = pi - h.step_size * pm[i] / (root(pv[i]) / h.bias_correction2_sqrt + h.eps);
  }
}

void rmsprop_update_cpu(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& buf, Tensor& grad_avg,
                        const RmspropHyper& given, const UpdateSource& source) {
  if (skipped(source)) return;
  const RmspropHyper h = hyper_of(given, source);
  const bool momentum = h.momentum > 0.f, centered = h.centered != 0.f;
  DPL_CHECK((!momentum || buf.numel() == param.numel()) && (!centered || grad_avg.numel() == param.numel()),
            "rmsprop_update: the momentum buffer and the gradient average must have the parameters' ",
            param.numel(), " elements when they are used");
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* sq = square_avg.data<float>();
  float* b = momentum ? buf.data<float>() : nullptr;
  float* ga = centered ? grad_avg.data<float>() : nullptr;
  const std::int64_t n = param.numel();
  const float one_minus_alpha = 1.f - h.alpha;
  // Rounding can leave square_avg - grad_avg^2 a hair below zero, where PyTorch's square root is
  // NaN; root() clamps it to the smallest normal float instead.
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + h.weight_decay * p[i];
    sq[i] = sq[i] * h.alpha + one_minus_alpha * gi * gi;
    float avg;
    if (centered) {
      ga[i] = ga[i] * h.alpha + one_minus_alpha * gi;
      avg = root(sq[i] - ga[i] * ga[i]) + h.eps;
    } else {
      avg = root(sq[i]) + h.eps;
    }
    if (momentum) {
      b[i] = b[i] * h.momentum + gi / avg;
      p[i] -= h.lr * b[i];
    } else {
      p[i] -= h.lr * gi / avg;
    }
  }
}

void adagrad_update_cpu(Tensor& param, const Tensor& grad, Tensor& sum, const AdagradHyper& given,
                        const UpdateSource& source) {
  if (skipped(source)) return;
  const AdagradHyper h = hyper_of(given, source);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* s = sum.data<float>();
  const std::int64_t n = param.numel();
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + h.weight_decay * p[i];
    s[i] += gi * gi;
    p[i] -= h.clr * gi / (root(s[i]) + h.eps);
  }
}

// --- per-segment kernels (LAMB, LARS): chunk rows as kernels.hpp describes them ----------------

struct Chunk {
  std::int64_t begin, length;
  std::int32_t first, count, flags;
};
Chunk chunk_at(const std::int32_t* table, std::int64_t c) {
  const std::int32_t* r = table + c * kSegmentTableColumns;
  return {static_cast<std::int64_t>(r[0]) * 16, r[1], r[3], r[4], r[5]};
}
std::int64_t chunk_count(const Tensor& segments, const Tensor& partials) {
  const std::int64_t chunks = segments.numel() / kSegmentTableColumns;
  DPL_CHECK(segments.numel() == chunks * kSegmentTableColumns && partials.numel() == 2 * chunks,
            "segment kernels: expected a table of ", kSegmentTableColumns, " columns and two partial sums per row, got ",
            segments.numel(), " table entries and ", partials.numel(), " partial sums");
  return chunks;
}
// The segment's two norms from its chunks' partial sums; double, so the sum of a large tensor's
// chunks loses nothing to their order.
std::pair<double, double> segment_norms_of(const float* partials, const Chunk& c) {
  double a = 0.0, b = 0.0;
  for (std::int32_t k = c.first; k < c.first + c.count; ++k) {
    a += partials[2 * k];
    b += partials[2 * k + 1];
  }
  return {std::sqrt(a), std::sqrt(b)};
}

void lamb_moments_cpu(const Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& segments,
                      Tensor& partials, const LambHyper& given, const UpdateSource& source) {
  if (skipped(source)) return;
  const LambHyper h = hyper_of(given, source);
  const std::int64_t chunks = chunk_count(segments, partials);
  const float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const std::int32_t* table = segments.data<std::int32_t>();
  float* out = partials.data<float>();
  const float one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_at(table, c);
    float ww = 0.f, uu = 0.f;
    for (std::int64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      pm[i] += one_minus_b1 * (g[i] - pm[i]);
      pv[i] += one_minus_b2 * (g[i] * g[i] - pv[i]);
      const float u = (pm[i] / h.bias_correction1) / (root(pv[i] / h.bias_correction2) + h.eps) + h.weight_decay * p[i];
      ww += p[i] * p[i];
      uu += u * u;
    }
    out[2 * c] = ww;
    out[2 * c + 1] = uu;
  }
}

void lamb_apply_cpu(Tensor& param, const Tensor& m, const Tensor& v, const Tensor& segments, const Tensor& partials,
                    const LambHyper& given, const UpdateSource& source) {
  if (skipped(source)) return;
  const LambHyper h = hyper_of(given, source);
  const std::int64_t chunks = chunk_count(segments, partials);
  float* p = param.data<float>();
  const float* pm = m.data<float>();
  const float* pv = v.data<float>();
  const std::int32_t* table = segments.data<std::int32_t>();
  const float* sums = partials.data<float>();
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_at(table, c);
    const auto [w_norm, u_norm] = segment_norms_of(sums, ch);
    const float trust = w_norm > 0.0 && u_norm > 0.0 ? static_cast<float>(w_norm / u_norm) : 1.f;
    const float scale = h.lr * trust;
    for (std::int64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      const float u = (pm[i] / h.bias_correction1) / (root(pv[i] / h.bias_correction2) + h.eps) + h.weight_decay * p[i];
      p[i] -= scale * u;
    }
  }
}

void segment_norms_cpu(const Tensor& param, const Tensor& grad, const Tensor& segments, Tensor& partials) {
  const std::int64_t chunks = chunk_count(segments, partials);
  const float* p = param.data<float>();
  const float* g = grad.data<float>();
  const std::int32_t* table = segments.data<std::int32_t>();
  float* out = partials.data<float>();
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_at(table, c);
    float ww = 0.f, gg = 0.f;
    for (std::int64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      ww += p[i] * p[i];
      gg += g[i] * g[i];
    }
    out[2 * c] = ww;
    out[2 * c + 1] = gg;
  }
}

void lars_update_cpu(Tensor& param, const Tensor& grad, Tensor& velocity, const Tensor& segments,
                     const Tensor& partials, const LarsHyper& given, const UpdateSource& source) {
  if (skipped(source)) return;
  const LarsHyper h = hyper_of(given, source);
  const std::int64_t chunks = chunk_count(segments, partials);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* vel = velocity.data<float>();
  const std::int32_t* table = segments.data<std::int32_t>();
  const float* sums = partials.data<float>();
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_at(table, c);
    const bool excluded = (ch.flags & kSegmentExcluded) != 0;
    const float wd = excluded ? 0.f : h.weight_decay;
    float local = 1.f;
    if (!excluded) {
      const auto [w_norm, g_norm] = segment_norms_of(sums, ch);
      if (w_norm > 0.0 && g_norm > 0.0)
        local = static_cast<float>(h.trust_coefficient * w_norm / (g_norm + h.weight_decay * w_norm));
    }
    const float scale = h.lr * local;
    for (std::int64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      vel[i] = h.momentum * vel[i] + scale * (g[i] + wd * p[i]);
      p[i] -= vel[i];
    }
  }
}

}  // namespace

DPL_REGISTER_KERNEL(sgd_update, kCpu, sgd_update_cpu);
DPL_REGISTER_KERNEL(momentum_update, kCpu, momentum_update_cpu);
DPL_REGISTER_KERNEL(adam_update, kCpu, adam_update_cpu);
DPL_REGISTER_KERNEL(adamw_update, kCpu, adamw_update_cpu);
DPL_REGISTER_KERNEL(rmsprop_update, kCpu, rmsprop_update_cpu);
DPL_REGISTER_KERNEL(adagrad_update, kCpu, adagrad_update_cpu);
DPL_REGISTER_KERNEL(lamb_moments, kCpu, lamb_moments_cpu);
DPL_REGISTER_KERNEL(lamb_apply, kCpu, lamb_apply_cpu);
DPL_REGISTER_KERNEL(segment_norms, kCpu, segment_norms_cpu);
DPL_REGISTER_KERNEL(lars_update, kCpu, lars_update_cpu);

}  // namespace dpl::backend::cpu
