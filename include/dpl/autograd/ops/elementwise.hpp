#pragma once
// Elementwise ops: arithmetic with bias-style broadcasting, activations, dropout and the
// scalar affine map with its operators.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"

namespace dpl {

/// Elementwise a+b, a-b, a*b, any rank. b has a's shape, or is bias-like: 1-D with a's last
/// extent (broadcast over every other dimension), or has one element (broadcast everywhere).
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
/// max(x, 0), any rank.
Variable relu(const Variable& x);

/// add, sub and mul as operators, with the same requirements.
inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }

/// x if x > 0 else slope * x, elementwise, any rank; NaN stays NaN. Float input.
Variable leaky_relu(const Variable& x, float slope = 0.01f);
/// 1 / (1 + exp(-x)), elementwise, any rank. Float input.
Variable sigmoid(const Variable& x);
/// tanh(x), elementwise, any rank. Float input.
Variable tanh(const Variable& x);
/// x * Phi(x), Phi the standard normal CDF: the exact erf form (PyTorch's default, not its tanh
/// approximation), elementwise, any rank. Float input.
Variable gelu(const Variable& x);
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
