// Activations, dropout, softmax over the last dimension, argmax and mean squared error on the CPU.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

// Writes o[i] = beta*o[i] + v(i), reading no old value when beta is 0 (it may be NaN).
template <typename V>
void write_beta(std::int64_t n, float beta, float* o, V&& v) {
  if (beta == 0.f) for_each_index(n, [&](std::int64_t i) { o[i] = v(i); });
  else for_each_index(n, [&](std::int64_t i) { o[i] += v(i); });
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
// GELU's tanh approximation, as PyTorch's GeluType::Tanh kernels: sqrt(2/pi) and the cubic term.
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluKappa = 0.044715f;

float gelu_tanh(float x) {
  return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + kGeluKappa * x * x * x)));
}

// d/dx of gelu_tanh, in PyTorch's order of operations.
float gelu_tanh_derivative(float x) {
  const float x2 = x * x;
  const float t = std::tanh(kSqrt2OverPi * (x + kGeluKappa * x2 * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluKappa * x2);
}

void activation_cpu(Activation f, float slope, float upper, const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const std::int64_t n = x.numel();
  switch (f) {
    // `x > 0 || x != x` passes NaN through instead of scaling it.
    case Activation::kLeakyRelu:
      for_each_index(n, [&](std::int64_t i) { py[i] = px[i] > 0.f || px[i] != px[i] ? px[i] : slope * px[i]; });
      break;
    case Activation::kSigmoid:
      for_each_index(n, [&](std::int64_t i) { py[i] = 1.f / (1.f + std::exp(-px[i])); });
      break;
    case Activation::kTanh: for_each_index(n, [&](std::int64_t i) { py[i] = std::tanh(px[i]); }); break;
    case Activation::kGelu:
      for_each_index(n, [&](std::int64_t i) { py[i] = 0.5f * px[i] * (1.f + std::erf(px[i] * kInvSqrt2)); });
      break;
    case Activation::kGeluTanh: for_each_index(n, [&](std::int64_t i) { py[i] = gelu_tanh(px[i]); }); break;
    case Activation::kExp: for_each_index(n, [&](std::int64_t i) { py[i] = std::exp(px[i]); }); break;
    case Activation::kLog: for_each_index(n, [&](std::int64_t i) { py[i] = std::log(px[i]); }); break;
    case Activation::kSqrt: for_each_index(n, [&](std::int64_t i) { py[i] = std::sqrt(px[i]); }); break;
    case Activation::kRsqrt: for_each_index(n, [&](std::int64_t i) { py[i] = 1.f / std::sqrt(px[i]); }); break;
    case Activation::kAbs: for_each_index(n, [&](std::int64_t i) { py[i] = std::fabs(px[i]); }); break;
    case Activation::kPow: for_each_index(n, [&](std::int64_t i) { py[i] = std::pow(px[i], slope); }); break;
    // Written as comparisons, not fmax/fmin, so that NaN passes as in PyTorch.
    case Activation::kClampMin:
      for_each_index(n, [&](std::int64_t i) { py[i] = px[i] < slope ? slope : px[i]; });
      break;
    case Activation::kClampMax:
      for_each_index(n, [&](std::int64_t i) { py[i] = px[i] > slope ? slope : px[i]; });
      break;
    case Activation::kClamp:
      for_each_index(n, [&](std::int64_t i) {
        const float lower = px[i] < slope ? slope : px[i];
        py[i] = lower > upper ? upper : lower;
      });
      break;
  }
}

void activation_backward_cpu(Activation f, float slope, float upper, const Tensor& saved, const Tensor& gy,
                             float beta, Tensor& gx) {
  const float* s = saved.data<float>();
  const float* g = gy.data<float>();
  float* o = gx.data<float>();
  const std::int64_t n = saved.numel();
  switch (f) {
    case Activation::kLeakyRelu:
      write_beta(n, beta, o, [&](std::int64_t i) { return s[i] > 0.f ? g[i] : slope * g[i]; });
      break;
    case Activation::kSigmoid:
      write_beta(n, beta, o, [&](std::int64_t i) { return g[i] * s[i] * (1.f - s[i]); });
      break;
    case Activation::kTanh: write_beta(n, beta, o, [&](std::int64_t i) { return g[i] * (1.f - s[i] * s[i]); }); break;
    case Activation::kGelu:
      write_beta(n, beta, o, [&](std::int64_t i) {
        const float cdf = 0.5f * (1.f + std::erf(s[i] * kInvSqrt2));
        const float pdf = kInvSqrt2Pi * std::exp(-0.5f * s[i] * s[i]);
        return g[i] * (cdf + s[i] * pdf);
      });
      break;
    case Activation::kGeluTanh:
      write_beta(n, beta, o, [&](std::int64_t i) { return g[i] * gelu_tanh_derivative(s[i]); });
      break;
    case Activation::kExp: write_beta(n, beta, o, [&](std::int64_t i) { return g[i] * s[i]; }); break;
    case Activation::kLog: write_beta(n, beta, o, [&](std::int64_t i) { return g[i] / s[i]; }); break;
    case Activation::kSqrt: write_beta(n, beta, o, [&](std::int64_t i) { return g[i] / (2.f * s[i]); }); break;
    case Activation::kRsqrt:
      write_beta(n, beta, o, [&](std::int64_t i) { return -0.5f * g[i] * s[i] * s[i] * s[i]; });
      break;
    case Activation::kAbs:
      write_beta(n, beta, o, [&](std::int64_t i) { return s[i] > 0.f ? g[i] : s[i] < 0.f ? -g[i] : 0.f; });
      break;
    case Activation::kPow:
      write_beta(n, beta, o,
                 [&](std::int64_t i) { return slope == 0.f ? 0.f : g[i] * slope * std::pow(s[i], slope - 1.f); });
      break;
    case Activation::kClampMin:
      write_beta(n, beta, o, [&](std::int64_t i) { return s[i] >= slope ? g[i] : 0.f; });
      break;
    case Activation::kClampMax:
      write_beta(n, beta, o, [&](std::int64_t i) { return s[i] <= slope ? g[i] : 0.f; });
      break;
    // The product of kClampMin's and kClampMax's masks, the second taken at max(x, slope).
    case Activation::kClamp:
      write_beta(n, beta, o, [&](std::int64_t i) {
        const float lower = s[i] < slope ? slope : s[i];
        return s[i] >= slope && lower <= upper ? g[i] : 0.f;
      });
      break;
  }
}

void dropout_cpu(float p, std::uint64_t seed, const Tensor& x, float beta, Tensor& y) {
  const float* px = x.data<float>();
  const float scale = 1.f / (1.f - p);
  write_beta(x.numel(), beta, y.data<float>(), [&](std::int64_t i) {
    return dropout_keeps(seed, static_cast<std::uint64_t>(i), p) ? px[i] * scale : 0.f;
  });
}

// Rows of the last dimension, each handled by one thread.
template <typename F>
void for_each_row(const Tensor& x, F&& f) {
  const std::int64_t cols = x.dim() ? x.size(-1) : 1;
  const std::int64_t rows = cols ? x.numel() / cols : 0;
#pragma omp parallel for if (x.numel() > kParallelGrain) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) f(r * cols, cols);
}

void softmax_cpu(bool log, const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for_each_row(x, [&](std::int64_t off, std::int64_t cols) {
    const float* xr = px + off;
    float* yr = py + off;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < cols; ++j) mx = std::fmax(mx, xr[j]);
    float s = 0.f;
    for (std::int64_t j = 0; j < cols; ++j) s += std::exp(xr[j] - mx);
    const float lse = mx + std::log(s);
    for (std::int64_t j = 0; j < cols; ++j) yr[j] = log ? xr[j] - lse : std::exp(xr[j] - mx) / s;
  });
}

void softmax_backward_cpu(bool log, const Tensor& y, const Tensor& gy, float beta, Tensor& gx) {
  const float* py = y.data<float>();
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  for_each_row(y, [&](std::int64_t off, std::int64_t cols) {
    const float* yr = py + off;
    const float* gr = pg + off;
    float* orow = po + off;
    float dot = 0.f;
    for (std::int64_t j = 0; j < cols; ++j) dot += log ? gr[j] : gr[j] * yr[j];
    for (std::int64_t j = 0; j < cols; ++j) {
      const float v = log ? gr[j] - std::exp(yr[j]) * dot : yr[j] * (gr[j] - dot);
      orow[j] = (beta == 0.f ? 0.f : orow[j]) + v;
    }
  });
}

void argmax_cpu(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  auto* po = out.data<std::int64_t>();
  for_each_row(x, [&](std::int64_t off, std::int64_t cols) {
    const float* xr = px + off;
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < cols && xr[best] == xr[best]; ++j)
      if (xr[j] > xr[best] || xr[j] != xr[j]) best = j;
    po[cols ? off / cols : 0] = best;
  });
}

void mse_cpu(const Tensor& x, const Tensor& target, Tensor& loss) {
  const float* px = x.data<float>();
  const float* pt = target.data<float>();
  const std::int64_t n = x.numel();
  double acc = 0.0;
#pragma omp parallel for simd reduction(+ : acc) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = px[i] - pt[i];
    acc += static_cast<double>(d * d);
  }
  loss.data<float>()[0] = n ? static_cast<float>(acc / static_cast<double>(n)) : 0.f;
}

void mse_backward_cpu(const Tensor& x, const Tensor& target, const Tensor& gloss, float alpha, float beta,
                      Tensor& g) {
  const float* px = x.data<float>();
  const float* pt = target.data<float>();
  const std::int64_t n = x.numel();
  const float scale = n ? alpha * gloss.data<float>()[0] * 2.f / static_cast<float>(n) : 0.f;
  write_beta(n, beta, g.data<float>(), [&](std::int64_t i) { return scale * (px[i] - pt[i]); });
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(activation, activation_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(activation_backward, activation_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(dropout, dropout_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax, softmax_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_backward, softmax_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(argmax, argmax_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(mse, mse_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(mse_backward, mse_backward_cpu);

}  // namespace dpl::backend::cpu
