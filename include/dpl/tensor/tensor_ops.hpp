#pragma once
// Arithmetic on plain tensors, for preparing data without building an autograd graph:
// normalising a batch, mixing two images, scaling labels' weights. Variables have their own,
// differentiable operators (dpl/autograd/ops.hpp); these compute the same values.
//
// Every operator here:
// - requires defined tensors of a float dtype (float32, bfloat16, float16) and, for two tensors,
//   one shape, one dtype and one device (no broadcasting); throws dpl::Error naming the operator
//   and what it received otherwise;
// - runs on the tensors' device (CPU or CUDA) through the backend's elementwise kernels, computing
//   in float32 and rounding a 16-bit result once;
// - returns a new tensor in the left operand's memory format (channels-last stays channels-last;
//   a view that is neither contiguous nor channels-last gives a contiguous result); the in-place
//   forms write into the left operand and return it.
// Scalars follow the Variable operators: t * s and t / s scale by s and by 1/s (a product with
// the reciprocal, as PyTorch's GPU kernels do); t + s and t - s add s rounded to t's dtype.

#include "dpl/tensor/tensor.hpp"

namespace dpl {

/// a + b, a - b, a * b, a / b elementwise (IEEE division: x / 0 is +-inf or NaN). Requires what
/// the file comment says.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);

/// t + s, t - s, t * s, t / s for every element, and the scalar on the left where the operation
/// commutes or negates (s + t, s - t, s * t). Requires a defined float tensor.
Tensor operator+(const Tensor& t, float s);
Tensor operator-(const Tensor& t, float s);
Tensor operator*(const Tensor& t, float s);
Tensor operator/(const Tensor& t, float s);
Tensor operator+(float s, const Tensor& t);
Tensor operator-(float s, const Tensor& t);
Tensor operator*(float s, const Tensor& t);
/// -t for every element. Requires a defined float tensor.
Tensor operator-(const Tensor& t);

/// In place: a = a op b. a's own memory is written (views of it see the change); b may be a
/// itself. Same requirements as the two-tensor operators. Returns a.
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);

/// In place: t = t op s. Same requirements as the scalar operators. Returns t.
Tensor& operator+=(Tensor& t, float s);
Tensor& operator-=(Tensor& t, float s);
Tensor& operator*=(Tensor& t, float s);
Tensor& operator/=(Tensor& t, float s);

}  // namespace dpl
