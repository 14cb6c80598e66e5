// Elementwise and reduction kernels on the CPU: flat OpenMP loops the compiler vectorises.
#include <algorithm>
#include <cmath>

#include "backend/broadcast.hpp"
#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

template <BinaryOp op>
inline float apply(float a, float b) {
  if constexpr (op == BinaryOp::kAdd) return a + b;
  if constexpr (op == BinaryOp::kSub) return a - b;
  if constexpr (op == BinaryOp::kDiv) return a / b;
  if constexpr (op == BinaryOp::kPow) return std::pow(a, b);
  if constexpr (op == BinaryOp::kPowGradBase) return b == 0.f ? 0.f : b * std::pow(a, b - 1.f);
  if constexpr (op == BinaryOp::kPowGradExponent) return a == 0.f && b >= 0.f ? 0.f : std::pow(a, b) * std::log(a);
  return a * b;
}

template <BinaryOp op>
void binary_typed(Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const std::int64_t n = a.numel();
  const bool acc = beta != 0.f;
  switch (bc) {
    case Broadcast::kNone:
      if (acc) for_each_index(n, [&](std::int64_t i) { po[i] += apply<op>(pa[i], pb[i]); });
      else for_each_index(n, [&](std::int64_t i) { po[i] = apply<op>(pa[i], pb[i]); });
      break;
    case Broadcast::kScalar: {
      const float s = pb[0];
      if (acc) for_each_index(n, [&](std::int64_t i) { po[i] += apply<op>(pa[i], s); });
      else for_each_index(n, [&](std::int64_t i) { po[i] = apply<op>(pa[i], s); });
      break;
    }
    case Broadcast::kShape: {
      const BroadcastIndex ix = make_broadcast_index(out.shape(), {&a.shape(), &b.shape()});
      for_each_index(out.numel(), [&](std::int64_t i) {
        std::int64_t off[2];
        ix.offsets(i, off);
        const float v = apply<op>(pa[off[0]], pb[off[1]]);
        po[i] = acc ? po[i] + v : v;
      });
      break;
    }
    case Broadcast::kRow: {
      const std::int64_t cols = b.numel();
      const std::int64_t rows = cols == 0 ? 0 : n / cols;
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* ar = pa + r * cols;
        float* orow = po + r * cols;
        if (acc) {
#pragma omp simd
          for (std::int64_t j = 0; j < cols; ++j) orow[j] += apply<op>(ar[j], pb[j]);
        } else {
#pragma omp simd
          for (std::int64_t j = 0; j < cols; ++j) orow[j] = apply<op>(ar[j], pb[j]);
        }
      }
      break;
    }
  }
}

void binary_cpu(BinaryOp op, Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& out) {
  switch (op) {
    case BinaryOp::kAdd: binary_typed<BinaryOp::kAdd>(bc, a, b, beta, out); break;
    case BinaryOp::kSub: binary_typed<BinaryOp::kSub>(bc, a, b, beta, out); break;
    case BinaryOp::kMul: binary_typed<BinaryOp::kMul>(bc, a, b, beta, out); break;
    case BinaryOp::kDiv: binary_typed<BinaryOp::kDiv>(bc, a, b, beta, out); break;
    case BinaryOp::kPow: binary_typed<BinaryOp::kPow>(bc, a, b, beta, out); break;
    case BinaryOp::kPowGradBase: binary_typed<BinaryOp::kPowGradBase>(bc, a, b, beta, out); break;
    case BinaryOp::kPowGradExponent: binary_typed<BinaryOp::kPowGradExponent>(bc, a, b, beta, out); break;
  }
}

void pow_backward_cpu(const Tensor& base, const Tensor& exponent, const Tensor& gy, float beta_base, Tensor* grad_base,
                      float beta_exponent, Tensor* grad_exponent) {
  const float* pa = base.data<float>();
  const float* pb = exponent.data<float>();
  const float* pg = gy.data<float>();
  float* ga = grad_base != nullptr ? grad_base->data<float>() : nullptr;
  float* gb = grad_exponent != nullptr ? grad_exponent->data<float>() : nullptr;
  const bool acc_a = beta_base != 0.f, acc_b = beta_exponent != 0.f;
  for_each_index(gy.numel(), [&](std::int64_t i) {
    if (ga != nullptr) {
      const float v = pg[i] * apply<BinaryOp::kPowGradBase>(pa[i], pb[i]);
      ga[i] = acc_a ? ga[i] + v : v;
    }
    if (gb != nullptr) {
      const float v = pg[i] * apply<BinaryOp::kPowGradExponent>(pa[i], pb[i]);
      gb[i] = acc_b ? gb[i] + v : v;
    }
  });
}

void where_cpu(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  const BroadcastIndex ix = make_broadcast_index(out.shape(), {&cond.shape(), &a.shape(), &b.shape()});
  const auto* pc = cond.data<std::uint8_t>();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for_each_index(out.numel(), [&](std::int64_t i) {
    std::int64_t off[3];
    ix.offsets(i, off);
    po[i] = pc[off[0]] != 0 ? pa[off[1]] : pb[off[2]];
  });
}

void axpby_cpu(float alpha, const Tensor& x, float beta, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  if (beta == 0.f) for_each_index(x.numel(), [&](std::int64_t i) { py[i] = alpha * px[i]; });
  else for_each_index(x.numel(), [&](std::int64_t i) { py[i] = beta * py[i] + alpha * px[i]; });
}

void sum_rows_cpu(float alpha, const Tensor& x, float beta, Tensor& out) {
  const std::int64_t cols = out.numel();
  const std::int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const float* px = x.data<float>();
  float* po = out.data<float>();
  // Columns are independent; each thread sums a block of columns down all rows.
#pragma omp parallel for if (x.numel() > kParallelGrain) schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += 256) {
    const std::int64_t c1 = std::min(cols, c0 + 256);
    float acc[256] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = px + r * cols;
#pragma omp simd
      for (std::int64_t j = c0; j < c1; ++j) acc[j - c0] += row[j];
    }
    for (std::int64_t j = c0; j < c1; ++j) po[j] = (beta == 0.f ? 0.f : beta * po[j]) + alpha * acc[j - c0];
  }
}

void sum_all_cpu(float alpha, const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  const std::int64_t n = x.numel();
  double acc = 0.0;  // double: a mean over a large batch should not lose digits to order
#pragma omp parallel for simd reduction(+ : acc) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) acc += px[i];
  out.data<float>()[0] = static_cast<float>(alpha * acc);
}

void sum_squares_cpu(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  const std::int64_t n = x.numel();
  double acc = 0.0;
#pragma omp parallel for simd reduction(+ : acc) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) acc += static_cast<double>(px[i]) * static_cast<double>(px[i]);
  out.data<float>()[0] = static_cast<float>(acc);
}

void clip_to_norm_cpu(Tensor& x, const Tensor& sum_squares, float max_norm) {
  const float norm = std::sqrt(sum_squares.data<float>()[0]);
  if (!(norm > max_norm)) return;
  const float scale = max_norm / norm;
  float* px = x.data<float>();
  for_each_index(x.numel(), [&](std::int64_t i) { px[i] *= scale; });
}

void fill_scaled_cpu(float alpha, const Tensor& s, float beta, Tensor& out) {
  const float v = alpha * s.data<float>()[0];
  float* po = out.data<float>();
  if (beta == 0.f) for_each_index(out.numel(), [&](std::int64_t i) { po[i] = v; });
  else for_each_index(out.numel(), [&](std::int64_t i) { po[i] = beta * po[i] + v; });
}

// Widened: each 16-bit operand arrives as float32, whatever the others' dtypes.
void scale_by_cpu(const Tensor& x, const Tensor& s, float beta, Tensor& out) {
  const float v = s.data<float>()[0];
  const float* px = x.data<float>();
  float* po = out.data<float>();
  if (beta == 0.f) for_each_index(x.numel(), [&](std::int64_t i) { po[i] = v * px[i]; });
  else for_each_index(x.numel(), [&](std::int64_t i) { po[i] = beta * po[i] + v * px[i]; });
}

// `!(x <= 0)` lets NaN through, as PyTorch's relu does.
void relu_cpu(const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for_each_index(x.numel(), [&](std::int64_t i) { py[i] = !(px[i] <= 0.f) ? px[i] : 0.f; });
}

void relu_backward_cpu(const Tensor& y, const Tensor& gy, float beta, Tensor& gx) {
  const float* py = y.data<float>();
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  if (beta == 0.f) for_each_index(y.numel(), [&](std::int64_t i) { po[i] = py[i] > 0.f ? pg[i] : 0.f; });
  else for_each_index(y.numel(), [&](std::int64_t i) { po[i] += py[i] > 0.f ? pg[i] : 0.f; });
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(binary, binary_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(pow_backward, pow_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(axpby, axpby_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(sum_rows, sum_rows_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(sum_all, sum_all_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(sum_squares, sum_squares_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(clip_to_norm, clip_to_norm_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(fill_scaled, fill_scaled_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(scale_by, scale_by_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(relu, relu_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(relu_backward, relu_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(where, where_cpu);

}  // namespace dpl::backend::cpu
