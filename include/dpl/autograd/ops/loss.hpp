#pragma once
// Losses and metrics: softmax cross-entropy (also fused with the linear layer that makes its
// logits), accuracy, negative log-likelihood, binary cross-entropy (on probabilities and on
// logits), mean squared, L1 and smooth L1 errors.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <cstdint>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// How a loss turns its per-element values into its result, as PyTorch's `reduction`: kNone
/// keeps them (the result has the per-element shape), kMean averages them (shape ()), kSum adds
/// them (shape ()). Sums accumulate in double.
enum class Reduction { kNone, kMean, kSum };

/// Mean over the batch of the cross-entropy between softmax(logits) and the target distribution
/// (1 - label_smoothing) * onehot(label) + label_smoothing / C (PyTorch's label smoothing; 0 gives
/// -log softmax(logits)[label]). logits (N,C), labels (N,) int32 in [0, C), label_smoothing in
/// [0, 1). Result has shape (). Host labels outside [0, C) throw dpl::Error; labels on a GPU
/// are not read back to be checked (that would stall every step): an out-of-range label there
/// gives a NaN loss, so check labels when loading them.
Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing = 0.f);
/// The settings of linear_cross_entropy beyond its operands.
struct LinearCrossEntropyOptions {
  /// Rows of logits computed at a time, >= 0; 0 chooses chunks of about 256 MiB of logits, split
  /// evenly over the rows. Larger chunks cost memory, smaller ones matrix-product efficiency; the
  /// result does not depend on it beyond float rounding.
  std::int64_t chunk_rows = 0;
  /// As softmax_cross_entropy's, in [0, 1).
  float label_smoothing = 0.f;
  /// A bias (V,) added to every row of logits, of x's dtype and device; undefined: none.
  Variable bias;
};
/// softmax_cross_entropy(linear(x, weight, bias), labels, label_smoothing) — the mean loss, shape
/// () of x's dtype — without ever holding the (N, V) logits: a language model's head over a
/// 50k-token vocabulary makes logits far larger than everything else in the step. Rows are taken
/// options.chunk_rows at a time; each chunk's logits are computed, their loss taken and, when a
/// gradient is wanted, turned into their gradient in place and multiplied out into x's gradient
/// and added into weight's (and bias's) at once, in forward. So the op holds one chunk of logits
/// while it runs, and afterwards only the gradients for a unit upstream gradient (x's shape,
/// weight's, bias's), in float32, which backward scales by the upstream gradient on the device,
/// with no host read, and rounds once into the inputs' dtype: no 16-bit rounding per chunk, and
/// float16's loss scale keeps working (a unit-gradient of a mean over many rows is below float16's
/// normal range). x (N, C), weight (V, C), bias: one float dtype and device, N, V >= 1; labels as
/// softmax_cross_entropy's, (N,) int32 in [0, V) (host labels are checked; on a GPU an
/// out-of-range label gives a NaN loss). Works under NoGradGuard (then only the loss is computed).
Variable linear_cross_entropy(const Variable& x, const Variable& weight, const Tensor& labels,
                              const LinearCrossEntropyOptions& options = {});
/// Fraction of rows whose arg-max is the label (no gradient). Result has shape ().
Tensor accuracy(const Variable& logits, const Tensor& labels);
/// (x - target)^2 elementwise, reduced as `reduction` says (the mean over all elements by
/// default). x and target have one shape, float dtype and device; both get gradients when they
/// require them. kMean and kSum need a non-empty input.
Variable mse_loss(const Variable& x, const Variable& target, Reduction reduction = Reduction::kMean);
/// |x - target| elementwise, reduced; requirements as mse_loss. The gradient at x == target is 0.
Variable l1_loss(const Variable& x, const Variable& target, Reduction reduction = Reduction::kMean);
/// PyTorch's smooth L1 (Huber scaled by 1/beta): 0.5 (x - t)^2 / beta where |x - t| < beta, else
/// |x - t| - 0.5 beta, reduced; requirements as mse_loss, and beta >= 0 (0 gives l1_loss).
Variable smooth_l1_loss(const Variable& x, const Variable& target, Reduction reduction = Reduction::kMean,
                        float beta = 1.f);
/// Negative log-likelihood of the labels under log-probabilities (e.g. log_softmax's output):
/// log_probs (N, C) or (N, C, d1, ...), labels (N,) or (N, d1, ...) of dtype int32 or int64 on
/// log_probs' device. Each element's loss is -log_probs[n, label, ...]; an element whose label is
/// ignore_index counts 0 and is left out of the mean (all left out: the mean is NaN, as
/// PyTorch). kNone gives the labels' shape. Host labels outside [0, C) other than ignore_index
/// throw dpl::Error; on a GPU they are not read back and make their element NaN. No class weights.
Variable nll_loss(const Variable& log_probs, const Tensor& labels, std::int64_t ignore_index = -100,
                  Reduction reduction = Reduction::kMean);
/// Binary cross-entropy of probabilities x in [0, 1] against targets in [0, 1] (a Tensor of x's
/// shape, dtype and device; no gradient), as PyTorch's: -(t log x + (1 - t) log(1 - x)) with each
/// log clamped to >= -100, reduced. Its gradient is (x - t) / max(x (1 - x), 1e-12).
Variable binary_cross_entropy(const Variable& x, const Tensor& target, Reduction reduction = Reduction::kMean);
/// Binary cross-entropy of sigmoid(logits) against targets, in the numerically stable form
/// (1 - t) x + (1 + (w - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)) with w = pos_weight, reduced.
/// target as binary_cross_entropy's. pos_weight, when defined, is 1-D with one element or x's
/// last extent (one weight per class, broadcast over the other dimensions), of x's dtype and
/// device; undefined means 1.
Variable binary_cross_entropy_with_logits(const Variable& logits, const Tensor& target,
                                          Reduction reduction = Reduction::kMean, const Tensor& pos_weight = Tensor());

}  // namespace dpl
