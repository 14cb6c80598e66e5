#pragma once
// Elementwise ops: arithmetic with bias-style broadcasting, activations, dropout and the
// scalar affine map with its operators.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <optional>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"

namespace dpl {

/// Elementwise a+b, a-b, a*b, any rank. b has a's shape, or is bias-like: 1-D with a's last
/// extent (broadcast over every other dimension), or has one element (broadcast everywhere; the
/// result has a's shape); otherwise the shapes broadcast as in PyTorch (aligned at the last
/// dimension, each extent equal or 1; the result has the broadcast shape and is contiguous).
/// Shapes that do not broadcast throw dpl::Error naming both.
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
/// Elementwise a / b with PyTorch's broadcasting of any compatible shapes (x / 0 gives Inf or NaN
/// as IEEE says). The result has the broadcast shape and is contiguous; both operands get
/// gradients (summed over the dimensions they were broadcast along).
Variable div(const Variable& a, const Variable& b);
/// Elementwise a^exponent with PyTorch's broadcasting (as div). Gradients as PyTorch's: for a,
/// exponent * a^(exponent-1), 0 where exponent == 0; for the exponent, a^exponent * log(a), 0
/// where a == 0 and exponent >= 0. A negative base with a non-integer exponent gives NaN.
Variable pow(const Variable& a, const Variable& exponent);
/// x^exponent elementwise, any rank; gradient exponent * x^(exponent-1) (0 for exponent 0).
Variable pow(const Variable& x, float exponent);
/// exp(x), log(x), sqrt(x), 1/sqrt(x), |x| elementwise, any rank, keeping x's memory format.
/// Outside the domain (log or sqrt of a negative number) the result is NaN, as in PyTorch; the
/// gradient of abs at 0 is 0.
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable rsqrt(const Variable& x);
Variable abs(const Variable& x);
/// -x, any rank (the same as the unary operator-).
Variable neg(const Variable& x);
/// x converted to another float dtype (PyTorch's x.to(dtype)), keeping its shape and memory
/// format; the gradient is converted back to x's dtype. x itself when it has that dtype already.
/// Requires x and dtype of float32, bfloat16 or float16 (dpl::Error otherwise).
Variable cast(const Variable& x, DType dtype);
/// x limited to [min, max] elementwise (either bound may be left out, not both; min > max gives
/// max everywhere, as PyTorch); NaN stays NaN. The gradient passes where min <= x <= max and is 0
/// outside, as PyTorch's. With both bounds it runs as two passes (max(x, min), then min(., max)).
Variable clamp(const Variable& x, std::optional<float> min, std::optional<float> max);
/// a where cond is non-zero, else b, elementwise; cond is a uint8 tensor of 0s and 1s (no
/// gradient) on the operands' device. cond, a and b broadcast as in PyTorch; the result has the
/// broadcast shape and is contiguous, and a and b get their gradients where they were chosen.
Variable where(const Tensor& cond, const Variable& a, const Variable& b);
/// x with `value` wherever mask is non-zero; mask is a uint8 tensor of 0s and 1s that broadcasts
/// to x's shape (PyTorch's masked_fill, whose mask is bool). The gradient of x is 0 where filled.
Variable masked_fill(const Variable& x, const Tensor& mask, float value);
/// max(x, 0), any rank.
Variable relu(const Variable& x);

/// add, sub and mul as operators, with the same requirements.
inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
/// div as an operator, with the same requirements.
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }

/// x if x > 0 else slope * x, elementwise, any rank; NaN stays NaN. Float input.
Variable leaky_relu(const Variable& x, float slope = 0.01f);
/// 1 / (1 + exp(-x)), elementwise, any rank. Float input.
Variable sigmoid(const Variable& x);
/// tanh(x), elementwise, any rank. Float input.
Variable tanh(const Variable& x);
/// How gelu computes Phi: PyTorch's `approximate` argument of F.gelu ('none' or 'tanh').
enum class GeluApproximation {
  kNone,  // the exact erf form, x * Phi(x) (PyTorch's default)
  kTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's and BERT's GELU)
};
/// x * Phi(x), Phi the standard normal CDF, elementwise, any rank; float input. By default the
/// exact erf form; with GeluApproximation::kTanh PyTorch's tanh approximation
/// (F.gelu(x, approximate='tanh')), forward and backward. float32 math for every dtype.
Variable gelu(const Variable& x, GeluApproximation approximate = GeluApproximation::kNone);
/// Inverted dropout, any rank: while `training` and p > 0, each element is zeroed with
/// probability p and the rest are scaled by 1 / (1 - p); otherwise x itself is returned. Requires
/// p in [0, 1). The mask is drawn on x's device from one 64-bit seed taken from `gen` per call
/// (a counter-based hash of the seed and the element's index), so equal generator states give
/// equal masks on the CPU and the GPU, and no mask is stored for backward.
Variable dropout(const Variable& x, float p, Generator& gen, bool training = true);

/// a * x + b elementwise with scalars a and b, any rank; a float input. A 16-bit result is rounded
/// after the scaling and, when b != 0, again after the shift (by b rounded to x's dtype).
Variable affine(const Variable& x, float a, float b);
/// Scalar operators, all through affine: x * s, s * x, x / s, x + s, s + x, x - s, s - x and -x.
inline Variable operator*(const Variable& x, float s) { return affine(x, s, 0.f); }
inline Variable operator*(float s, const Variable& x) { return affine(x, s, 0.f); }
inline Variable operator/(const Variable& x, float s) { return affine(x, 1.f / s, 0.f); }
inline Variable operator+(const Variable& x, float s) { return affine(x, 1.f, s); }
inline Variable operator+(float s, const Variable& x) { return affine(x, 1.f, s); }
inline Variable operator-(const Variable& x, float s) { return affine(x, 1.f, -s); }
inline Variable operator-(float s, const Variable& x) { return affine(x, -1.f, s); }
inline Variable operator-(const Variable& x) { return affine(x, -1.f, 0.f); }

}  // namespace dpl
