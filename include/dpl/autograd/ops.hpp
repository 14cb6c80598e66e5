#pragma once
// Differentiable ops. Each runs on the inputs' device and records itself for backward when an
// input requires a gradient. Shape or dtype mismatches throw dpl::Error naming the op and the
// expected and received shapes; nothing is broadcast silently.
//
// Float inputs may be float32, bfloat16 or float16, the same for every operand of an op; results
// and gradients have the inputs' dtype, and 16-bit math is computed in float32 and rounded once
// per kernel.

#include <array>
#include <cstdint>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"

namespace dpl {

/// (N,K) x (K,M) -> (N,M); 2-D only.
Variable matmul(const Variable& a, const Variable& b);
/// y = x W^T + b for x (N,in), W (out,in), b (out,) or undefined (no bias); 2-D only.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());
/// Elementwise a+b, a-b, a*b, any rank. b has a's shape, or is bias-like: 1-D with a's last
/// extent (broadcast over every other dimension), or has one element (broadcast everywhere).
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
/// max(x, 0), any rank.
Variable relu(const Variable& x);
/// Same data, new shape (one extent may be -1).
Variable reshape(const Variable& x, const Shape& shape);
/// (N, ...) -> (N, prod(...)) for start_dim 1.
Variable flatten(const Variable& x, std::int64_t start_dim = 1);
/// Sum and mean of all elements, any rank (one-element result of shape ()).
Variable sum(const Variable& x);
Variable mean(const Variable& x);
/// Mean over the batch of the cross-entropy between softmax(logits) and the target distribution
/// (1 - label_smoothing) * onehot(label) + label_smoothing / C (PyTorch's label smoothing; 0 gives
/// -log softmax(logits)[label]). logits (N,C), labels (N,) int32 in [0, C), label_smoothing in
/// [0, 1). Result has shape (). Host labels outside [0, C) throw dpl::Error; labels on a GPU
/// are not read back to be checked (that would stall every step): an out-of-range label there
/// gives a NaN loss, so check labels when loading them.
Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing = 0.f);
/// Fraction of rows whose arg-max is the label (no gradient). Result has shape ().
Tensor accuracy(const Variable& logits, const Tensor& labels);

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }

// --- convolution ----------------------------------------------------------------------------

/// A (height, width) pair of convolution settings.
using Conv2dPair = std::array<std::int64_t, 2>;

/// 2-D cross-correlation, as PyTorch's conv2d: x (N, C, H, W), weight (O, C/groups, KH, KW), bias
/// (O,) or undefined (no bias), one float dtype and device for all. Zero padding on both sides,
/// strides and dilations at least 1; C and O divisible by groups. Returns (N, O, OH, OW) with
/// OH = (H + 2*padding - dilation*(KH-1) - 1) / stride + 1 (floor), likewise OW, which must be at
/// least 1. Requires oneDNN (CPU) or cuDNN (GPU) in the build; throws dpl::Error without them.
///
/// Memory format: a channels-last input (Tensor::is_channels_last, not also contiguous) gives a
/// channels-last output and is computed in NHWC with the weight converted to channels-last if it
/// is not (keep weights channels-last to avoid that copy); any other input is computed in NCHW.
/// Gradients land in their buffers' layout. 16-bit math accumulates in float32.
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias = Variable(),
                Conv2dPair stride = {1, 1}, Conv2dPair padding = {0, 0}, Conv2dPair dilation = {1, 1},
                std::int64_t groups = 1);

}  // namespace dpl

// --- normalization and pooling ------------------------------------------------------------------
// Image inputs are 4-D (N, C, H, W) by shape, in NCHW (contiguous) or channels-last memory (the
// stride of C is 1, of W is C); outputs keep the input's format. Other strides are first copied
// to NCHW.

namespace dpl {

/// Height and width of a 2-D window; one number means the same for both.
struct Size2d {
  /// {both, both}, and {height, width}; the ops check the values.
  Size2d(std::int64_t both) : h(both), w(both) {}  // NOLINT: implicit, so that 3 means {3, 3}
  Size2d(std::int64_t height, std::int64_t width) : h(height), w(width) {}
  std::int64_t h, w;
};

/// Max over windows of `kernel` moved by `stride` (0: the kernel's extent, PyTorch's default)
/// over x zero-padded by `padding` on each side (padding never wins the max). Requires a 4-D
/// float input, kernel and stride >= 1, 0 <= padding <= kernel / 2 and a padded input at least as
/// large as the kernel. Returns (N, C, Ho, Wo) with Ho = (H + 2 pad - kernel) / stride + 1 (floor).
/// The gradient goes to each window's arg-max.
Variable max_pool2d(const Variable& x, Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0));
/// Mean over the same windows as max_pool2d (same requirements and output shape). With
/// count_include_pad (PyTorch's default) padded zeros count in the divisor; without, only the
/// input pixels in the window do.
Variable avg_pool2d(const Variable& x, Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0),
                    bool count_include_pad = true);
/// Mean over H and W: (N, C, H, W) -> (N, C). Requires a 4-D float input with H, W >= 1.
Variable global_avg_pool2d(const Variable& x);

/// Batch normalisation over (N, H, W) per channel of a 4-D float x with C channels.
/// weight and bias: (C,) on x's device of one float dtype (float32; or 16-bit, as in a model cast
/// by optim::MixedPrecision, widened to float32 for the arithmetic and their gradients rounded
/// back), or undefined (scale 1, shift 0). Statistics are float32 whatever x's dtype. Training: normalises with the batch mean and biased variance
/// (requires N*H*W >= 2) and, when running_mean and running_var are defined (float32 (C,)),
/// updates them in place as running = (1 - momentum) running + momentum batch, with the unbiased
/// variance (PyTorch's convention; momentum 0.1 there). Evaluation: normalises with the running
/// statistics (required); a gradient through an evaluation-mode call is not supported and throws
/// when backward reaches it. Returns x's shape, dtype and memory format.
Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
/// relu(batch_norm(...)), same requirements; fused into one pass where the device's library can.
Variable batch_norm_relu(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
/// relu(batch_norm(...) + z) for z of x's shape and dtype (a residual), same requirements;
/// fused where the device's library can.
Variable batch_norm_add_relu(const Variable& x, const Variable& z, const Variable& weight, const Variable& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training,
                             double momentum = 0.1, double eps = 1e-5);

// --- activations, dropout, softmax, argmax, mean squared error, scalar arithmetic ---------------

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
/// softmax over the last dimension, any rank >= 1 (every leading index is a row). Float input.
Variable softmax(const Variable& x);
/// log(softmax(x)) over the last dimension, computed as x - logsumexp(x) (finite where softmax
/// underflows), any rank >= 1. Float input.
Variable log_softmax(const Variable& x);
/// Index of the largest value along the last dimension (the first on ties; a NaN counts as the
/// largest), as an int64 tensor of x's shape without its last dimension; no gradient. Float input
/// of rank >= 1 with a non-empty last dimension.
Tensor argmax(const Variable& x);
/// Mean of (x - target)^2 over all elements; result has shape (). x and target have one shape,
/// float dtype and device; both get gradients when they require them.
Variable mse_loss(const Variable& x, const Variable& target);

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
