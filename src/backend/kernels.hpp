#pragma once
// The kernels: each declared once, here, as a stub that dispatches on its arguments' device
// (dispatch.hpp). Implementations are file-local functions in src/backend/cpu/ and
// src/backend/cuda/ that register themselves with DPL_REGISTER_KERNEL.
//
// Conventions for every kernel:
//  - the dispatcher checks that every tensor argument is defined and on one device, and the
//    dtypes as the kernel's DTypeRule says (one float dtype for the math, int32 labels, float32
//    optimizer state); kernels may assume both. Shapes are the caller's to check (the ops do);
//  - tensors are contiguous unless stated;
//  - float math takes float32, bfloat16 and float16 tensors; 16-bit values are widened to float32
//    for the arithmetic and sums accumulate in float32 (or wider), so each 16-bit output is its
//    float32 result rounded once (to nearest even);
//  - `beta` is 0 or 1: the kernel writes (beta 0, the old contents are ignored, even NaN) or adds
//    to (beta 1) its output. Backward kernels take it so that gradient accumulation costs no
//    extra pass over memory;
//  - kernels run asynchronously on the device's compute stream where the device has one.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/dispatch.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend {

/// How the second operand of a binary elementwise op is broadcast.
enum class Broadcast {
  kNone,    // b has a's shape
  kRow,     // b has shape (C,) and a any shape (..., C): b is added to every row of the last dimension
  kScalar,  // b has one element
  kShape,   // a and b have out's rank and each extent equal to out's or 1 (PyTorch's broadcasting);
            // out has the broadcast shape (up to 8 dimensions once mergeable ones are merged)
};

/// The binary elementwise ops. kPowGradBase and kPowGradExponent are pow's partial derivatives
/// with PyTorch's conventions at the edges: b * a^(b-1), 0 where b == 0; and a^b * log(a), 0 where
/// a == 0 and b >= 0.
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kPowGradBase, kPowGradExponent };

struct SgdHyper {
  float lr;
  float weight_decay;
};
struct MomentumHyper {
  float lr;
  float momentum;
  float weight_decay;
};
struct AdamHyper {
  float lr_t;   // alpha * sqrt(1 - beta2^t) / (1 - beta1^t)
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
};
/// Where an optimizer update finds what may change from step to step when the step is recorded
/// once and replayed (a CUDA graph): `hyper`, when given, holds the Hyper struct's fields in
/// order (float32, on the parameters' device) and replaces the struct passed by value; `skip`,
/// when given (one float32 on that device), makes the update leave everything unchanged while
/// it is non-zero — the non-finite flag, read by the kernel instead of the host.
struct UpdateSource {
  const Tensor* hyper = nullptr;
  const Tensor* skip = nullptr;
};

// --- memory and streams (dispatch on the Device argument) -------------------------------------

/// nbytes of memory on device (host memory 64-byte aligned). Throws dpl::Error when refused.
DPL_DECLARE_KERNEL(allocate, any(), void*(Device device, std::size_t nbytes));
/// Returns p (from allocate on the same device) to device's allocator.
DPL_DECLARE_KERNEL(deallocate, any(), void(Device device, void* p));
/// Copies nbytes between two buffers on device (they may overlap on the host).
DPL_DECLARE_KERNEL(copy_bytes, any(), void(Device device, void* dst, const void* src, std::size_t nbytes));
/// Waits until all work queued on device is done.
DPL_DECLARE_KERNEL(synchronize, any(), void(Device device));

// --- data movement (any dtype, any strides) ---------------------------------------------------

/// dst = src for tensors of one shape and dtype with any strides (up to 8 non-mergeable
/// dimensions on the GPU).
DPL_DECLARE_KERNEL(copy_strided, same(), void(const Tensor& src, Tensor& dst));
/// out = inputs joined along dimension dim (0 <= dim < out's rank): each input contiguous, of
/// out's dtype and rank and of out's extents except at dim, where theirs sum to out's; out
/// contiguous. One pass over out on the GPU. The dispatcher sees out only (the op checks the
/// inputs' devices and dtypes).
DPL_DECLARE_KERNEL(cat, any(), void(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out));
/// Every element of t (any strides) = value converted to t's dtype (16-bit: nearest even).
DPL_DECLARE_KERNEL(fill, any(), void(Tensor& t, double value));
/// dst (float32, contiguous, as many elements as values) = values, in stream order. On a GPU the
/// values travel through page-locked staging memory, so the copy neither waits for the device
/// (a copy from pageable memory may) nor needs the caller's vector afterwards.
DPL_DECLARE_KERNEL(write_values, float32(), void(Tensor& dst, const std::vector<float>& values));
/// Values of a small float32 tensor on their way to the host, from read_back_start().
class PendingRead {
 public:
  virtual ~PendingRead() = default;
  /// Waits for the copy (and so for the work queued before it, not after) and returns the values.
  virtual std::vector<float> wait() = 0;
};
/// Starts reading src (float32, contiguous, a few elements) back to the host behind the work
/// queued so far, without waiting: on a GPU the copy goes to page-locked memory and an event marks
/// its end, so later work may be queued before the values are asked for. On the CPU the values
/// are read at once.
DPL_DECLARE_KERNEL(read_back_start, float32(), std::shared_ptr<PendingRead>(const Tensor& src));
/// dst = src converted between float32, bfloat16 and float16 in any direction (nearest even; NaN
/// stays NaN). Same shape; both contiguous, or both channels-last (converted in memory order).
DPL_DECLARE_KERNEL(cast, floating_each(), void(const Tensor& src, Tensor& dst));

// Indexing along one dimension (index_select, gather, embedding). Index tensors are int64 or
// int32, contiguous; the dispatcher checks only the device, these kernels the dtypes: the float
// tensors of a call share one float dtype. Host indices are range-checked by the callers (the
// ops); on the GPU an index out of range gives NaN in the forward kernels and is skipped by the
// backward kernels, instead of reading or writing outside the tensor. The backward kernels add
// with float32 atomics on the GPU (a 16-bit gradient accumulates in a float32 copy that is
// rounded once), so the order of the additions, and so the last bit of a float32 sum over
// repeated indices, may change from run to run; on the CPU they add in index order.

/// out (..., m, ...) = x (..., n, ...) with dimension `dim` picked by index (m,): out[.., j, ..] =
/// x[.., index[j], ..]. x and out contiguous, of one float dtype.
DPL_DECLARE_KERNEL(index_select, any(), void(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out));
/// gx = beta*gx + the gradient of index_select: gx[.., index[j], ..] += g[.., j, ..] for every j
/// whose index is not `skip` (-1: none skipped; an embedding's padding row otherwise).
DPL_DECLARE_KERNEL(index_add, any(),
                   void(const Tensor& index, std::int64_t dim, std::int64_t skip, const Tensor& g, float beta,
                        Tensor& gx));
/// out (index's shape) = x along `dim` at index: out[i0, .., id, ..] = x[i0, .., index[i0, .., id, ..], ..]
/// (PyTorch's gather). index has x's rank (at most 8) and extents no larger than x's but at `dim`.
DPL_DECLARE_KERNEL(gather, any(), void(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out));
/// gx = beta*gx + the gradient of gather: gx at gather's source position of every element of g
/// (index's shape) += that element (PyTorch's scatter_add).
DPL_DECLARE_KERNEL(scatter_add, any(),
                   void(const Tensor& index, std::int64_t dim, const Tensor& g, float beta, Tensor& gx));

// --- math --------------------------------------------------------------------------------------

/// c = alpha * op(a) op(b) + beta * c for row-major 2-D matrices (16-bit: float32 accumulation).
/// c has a's and b's dtype, or float32 beside 16-bit a and b: then nothing is rounded to 16 bits,
/// so products summed into c over several calls (beta 1) are rounded once, by whoever casts c.
DPL_DECLARE_KERNEL(gemm, floating().or_float32_at(2),
                   void(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                        Tensor& c));
/// out (m, n) = x (m, k) w^T + bias for w (n, k) and bias (n,) added to every row: a linear
/// layer's forward, a 16-bit result rounded once. On the GPU the bias is added in the matrix
/// product's epilogue (cuBLASLt), so out is written once; operands that break 16-byte alignment
/// take a product and an add instead (rounded twice).
DPL_DECLARE_KERNEL(linear_bias, floating(),
                   void(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out));
/// pre (m, n) = x (m, k) w^T + bias and out = gelu_tanh(pre): a linear layer and GPT's activation
/// in one pass, each result rounded once from float32. On the GPU in 16 bits the activation runs
/// in the product's epilogue (cuBLASLt), which also stores pre for backward; operands it refuses
/// take a linear_bias and an activation pass instead (out then computed from the rounded pre).
DPL_DECLARE_KERNEL(linear_bias_gelu, floating(),
                   void(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, Tensor& pre));
/// dpre (m, n) = gelu_tanh'(pre) * (gy (m, k) w (k, n)), and, when dbias is given,
/// dbias (n,) = beta_bias * dbias + the column sums of dpre: the backward of linear_bias_gelu's
/// activation taken in the product that gives the activation's output gradient (dpre rounded
/// once), and the bias gradient summed from dpre. On the GPU in 16 bits the derivative is the
/// product's epilogue (cuBLASLt); operands it refuses take a product and an activation backward
/// (rounded in between).
DPL_DECLARE_KERNEL(gemm_dgelu_bgrad, floating(),
                   void(const Tensor& gy, const Tensor& w, const Tensor& pre, Tensor& dpre, float beta_bias,
                        Tensor* dbias));
/// c[i] = alpha * op(a[i]) op(b[i]) + beta * c[i] for a batch of row-major matrices: a, b, c
/// contiguous 3-D (batch, rows, cols) with one batch extent (16-bit: float32 accumulation).
DPL_DECLARE_KERNEL(gemm_batched, floating(),
                   void(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                        Tensor& c));
/// out = beta*out + (a op b), any rank, with b broadcast as `bc` says; out may alias a.
DPL_DECLARE_KERNEL(binary, floating(),
                   void(BinaryOp op, Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& out));
/// pow's two gradients in one pass over a base and an exponent of gy's shape (no broadcast):
/// grad_base = beta_base*grad_base + gy * kPowGradBase(base, exponent), grad_exponent likewise
/// with kPowGradExponent. A null output is skipped. The outputs are not checked by the dispatcher:
/// they have gy's shape, dtype and device.
DPL_DECLARE_KERNEL(pow_backward, floating(),
                   void(const Tensor& base, const Tensor& exponent, const Tensor& gy, float beta_base,
                        Tensor* grad_base, float beta_exponent, Tensor* grad_exponent));
/// y = beta*y + alpha*x (same number of elements, any rank).
DPL_DECLARE_KERNEL(axpby, floating(), void(float alpha, const Tensor& x, float beta, Tensor& y));
/// out (C,) = beta*out + alpha * sum of x (..., C) over every dimension but the last.
DPL_DECLARE_KERNEL(sum_rows, floating(), void(float alpha, const Tensor& x, float beta, Tensor& out));
/// out (1 element) = alpha * sum of all elements of x (any rank; accumulated in double).
DPL_DECLARE_KERNEL(sum_all, floating(), void(float alpha, const Tensor& x, Tensor& out));
/// out (1 element, float32) = the sum of the squares of x's elements (any rank; accumulated in
/// double): a squared L2 norm without a squared copy of x.
DPL_DECLARE_KERNEL(sum_squares, floating().float32_at(1), void(const Tensor& x, Tensor& out));
/// x *= max_norm / sqrt(sum_squares[0]) when that norm exceeds max_norm, else x is left exactly as it
/// was (sum_squares, one float32 element, is read on the device, so nothing waits for it).
DPL_DECLARE_KERNEL(clip_to_norm, floating().float32_at(1), void(Tensor& x, const Tensor& sum_squares, float max_norm));
/// out = beta*out + alpha * s[0] for every element of out (s has one element, read on the device).
DPL_DECLARE_KERNEL(fill_scaled, floating(), void(float alpha, const Tensor& s, float beta, Tensor& out));
/// out = beta*out + s[0] * x elementwise (x and out with one element count, any rank, contiguous;
/// s one element, read on the device, so the scale can be a gradient an earlier kernel wrote).
/// x, s and out may each be float32, bfloat16 or float16: computed in float32 and rounded once,
/// so a float32 x (a gradient kept unrounded) lands in a 16-bit out rounded once. out may be x.
DPL_DECLARE_KERNEL(scale_by, floating_each(), void(const Tensor& x, const Tensor& s, float beta, Tensor& out));
/// y = max(x, 0), any rank; NaN stays NaN (as PyTorch's relu).
DPL_DECLARE_KERNEL(relu, floating(), void(const Tensor& x, Tensor& y));
/// gx = beta*gx + gy * (y > 0), any rank.
DPL_DECLARE_KERNEL(relu_backward, floating(), void(const Tensor& y, const Tensor& gy, float beta, Tensor& gx));
/// lse (N,) float32 = log-sum-exp of each row of logits (N, C); loss (1 element) = mean over rows
/// of the cross-entropy of softmax(logits) against the target distribution (1 - smoothing) *
/// onehot(label) + smoothing / C, smoothing in [0, 1). Labels are int32; host labels are
/// range-checked by the caller, and on the GPU an out-of-range label makes the loss NaN. Only lse
/// is kept for backward, which recomputes the probabilities from the logits: no (N, C) tensor
/// beside the logits. loss has the logits' dtype, or float32 (a mean that is summed on, unrounded).
DPL_DECLARE_KERNEL(softmax_xent, floating().int32_at(1).float32_at(2).or_float32_at(3),
                   void(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss));
/// glogits = beta*glogits + gloss[0] / N * (exp(logits - lse) - (1 - smoothing) * onehot(labels) -
/// smoothing / C). glogits may be logits itself (beta 0): the gradient then replaces the logits.
/// gloss has the logits' dtype, or float32 (a scale that a 16-bit type cannot hold exactly).
DPL_DECLARE_KERNEL(softmax_xent_backward, floating().int32_at(1).float32_at(2).or_float32_at(3),
                   void(const Tensor& logits, const Tensor& labels, const Tensor& lse, float smoothing,
                        const Tensor& gloss, float beta, Tensor& glogits));
/// softmax_xent, and then the logits replaced by their gradient for the loss gradient gloss[0]
/// (softmax_xent_backward with beta 0 and glogits = logits, the same values bit for bit), in one
/// pass over the rows: a head that needs both reads its logits from memory once. loss and gloss
/// have the logits' dtype or float32, as in those two kernels.
DPL_DECLARE_KERNEL(softmax_xent_and_grad, floating().int32_at(1).or_float32_at(2).float32_at(3).or_float32_at(4),
                   void(Tensor& logits, const Tensor& labels, float smoothing, const Tensor& gloss, Tensor& lse,
                        Tensor& loss));
/// out (1 element) = fraction of rows of logits (N, C) whose arg-max (first on ties) is the label.
DPL_DECLARE_KERNEL(accuracy, floating().int32_at(1), void(const Tensor& logits, const Tensor& labels, Tensor& out));

// --- optimizers: one fused pass over a whole arena; float32 master weights and state ----------

/// param -= lr * (grad + weight_decay * param), elementwise over the arena.
DPL_DECLARE_KERNEL(sgd_update, float32(),
                   void(Tensor& param, const Tensor& grad, const SgdHyper& h, const UpdateSource& source));
/// Chainer's MomentumSGD: velocity = momentum*velocity - lr*(grad + wd*param); param += velocity.
DPL_DECLARE_KERNEL(momentum_update, float32(),
                   void(Tensor& param, const Tensor& grad, Tensor& velocity, const MomentumHyper& h,
                        const UpdateSource& source));
/// Chainer's Adam: m += (1-beta1)(g-m); v += (1-beta2)(g^2-v); param -= lr_t*m/(sqrt(v)+eps), with
/// g = grad + weight_decay*param.
DPL_DECLARE_KERNEL(adam_update, float32(),
                   void(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                        const UpdateSource& source));

/// PyTorch's AdamW (decoupled weight decay): param *= 1 - lr*weight_decay; m += (1-beta1)(g-m);
/// v = beta2*v + (1-beta2)*g^2; param -= step_size * m / (sqrt(v)/bias_correction2_sqrt + eps),
/// with step_size = lr/(1-beta1^t) and bias_correction2_sqrt = sqrt(1-beta2^t).
struct AdamWHyper {
  float lr;
  float step_size;
  float bias_correction2_sqrt;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
};
DPL_DECLARE_KERNEL(adamw_update, float32(),
                   void(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                        const UpdateSource& source));
/// PyTorch's RMSprop: g = grad + weight_decay*param; square_avg = alpha*square_avg + (1-alpha)g^2;
/// centered (centered != 0): grad_avg = alpha*grad_avg + (1-alpha)g and
/// avg = sqrt(square_avg - grad_avg^2) + eps, else avg = sqrt(square_avg) + eps; with momentum > 0:
/// buf = momentum*buf + g/avg, param -= lr*buf, else param -= lr*g/avg. buf is read only with
/// momentum > 0 and grad_avg only when centered; otherwise they may be empty.
struct RmspropHyper {
  float lr;
  float alpha;
  float eps;
  float weight_decay;
  float momentum;
  float centered;  // 0 or 1
};
DPL_DECLARE_KERNEL(rmsprop_update, float32(),
                   void(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& buf, Tensor& grad_avg,
                        const RmspropHyper& h, const UpdateSource& source));
/// PyTorch's Adagrad: g = grad + weight_decay*param; sum += g^2; param -= clr*g/(sqrt(sum)+eps),
/// with clr = lr/(1 + (t-1)*lr_decay).
struct AdagradHyper {
  float clr;
  float weight_decay;
  float eps;
};
DPL_DECLARE_KERNEL(adagrad_update, float32(),
                   void(Tensor& param, const Tensor& grad, Tensor& sum, const AdagradHyper& h,
                        const UpdateSource& source));

/// The per-tensor (segment) kernels below walk the arena in chunks described by an int32 table
/// of shape (chunks, kSegmentTableColumns), one row per chunk of at most kSegmentChunk elements
/// of one segment (an arena entry), in arena order: the chunk's first element divided by 16
/// (entries start on 16-element boundaries), its length, its segment, the segment's first chunk
/// row, the segment's number of chunks, and the segment's flags (kSegmentExcluded). `partials`
/// (float32, chunks x 2) receives two sums of squares per chunk, which the update kernel adds
/// up per segment: no host round trip, so both can be recorded in a CUDA graph.
inline constexpr std::int64_t kSegmentChunk = 16384;
inline constexpr std::int64_t kSegmentTableColumns = 6;
/// A segment flag: the tensor takes no trust ratio (LARS: local lr 1 and no weight decay).
inline constexpr std::int32_t kSegmentExcluded = 1;
/// LAMB (You et al. 2019) with Adam's bias correction and decoupled weight decay.
struct LambHyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float bias_correction1;  // 1 - beta1^t
  float bias_correction2;  // 1 - beta2^t
};
/// LAMB's first pass: m += (1-beta1)(g-m); v += (1-beta2)(g^2-v); per chunk, partials =
/// (sum of param^2, sum of u^2) with u = (m/bc1) / (sqrt(v/bc2) + eps) + weight_decay*param.
DPL_DECLARE_KERNEL(lamb_moments, float32().int32_at(4),
                   void(const Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& segments,
                        Tensor& partials, const LambHyper& h, const UpdateSource& source));
/// LAMB's second pass: per segment, trust = ||param|| / ||u|| (1 when either is 0), and
/// param -= lr * trust * u, u recomputed from m and v as the first pass made them.
DPL_DECLARE_KERNEL(lamb_apply, float32().int32_at(3),
                   void(Tensor& param, const Tensor& m, const Tensor& v, const Tensor& segments,
                        const Tensor& partials, const LambHyper& h, const UpdateSource& source));
/// LARS (You et al. 2017) with momentum.
struct LarsHyper {
  float lr;
  float momentum;
  float weight_decay;
  float trust_coefficient;
};
/// LARS's first pass: per chunk, partials = (sum of param^2, sum of grad^2). Read-only otherwise.
DPL_DECLARE_KERNEL(segment_norms, float32().int32_at(2),
                   void(const Tensor& param, const Tensor& grad, const Tensor& segments, Tensor& partials));
/// LARS's second pass: per segment, local = trust_coefficient*||param|| / (||grad|| +
/// weight_decay*||param||) (1 when either norm is 0); velocity = momentum*velocity + lr*local*(grad
/// + weight_decay*param); param -= velocity. A kSegmentExcluded segment takes local 1 and no
/// weight decay.
DPL_DECLARE_KERNEL(lars_update, float32().int32_at(3),
                   void(Tensor& param, const Tensor& grad, Tensor& velocity, const Tensor& segments,
                        const Tensor& partials, const LarsHyper& h, const UpdateSource& source));

/// Mixed precision's one pass over a 16-bit gradient arena: master = grad * inv_scale in float32
/// (grad of any float dtype, master float32 with as many elements, both contiguous), and
/// found_inf[0] = 1 (float32, one element) when any element of master came out Inf or NaN;
/// otherwise found_inf is left as it was, so the caller zeroes it first. Nothing is read back to
/// the host.
DPL_DECLARE_KERNEL(unscale_grads, floating_each(),
                   void(const Tensor& grad, float inv_scale, Tensor& master, Tensor& found_inf));
/// unscale_grads with the factor read from inv_scale (float32, one element, on grad's device) when
/// the pass runs, not when it is queued: what a recorded step (a CUDA graph) uses, so that a replay
/// applies the loss scale of its own step.
DPL_DECLARE_KERNEL(unscale_grads_by, floating_each(),
                   void(const Tensor& grad, const Tensor& inv_scale, Tensor& master, Tensor& found_inf));
/// The non-finite check's one read-only pass over a gradient arena (x of any float dtype,
/// contiguous): flag[0] = 1 (float32, one element) when any element of x is Inf or NaN; otherwise
/// flag is left as it was, so the caller zeroes it first and several buffers can share one flag.
/// Nothing is read back to the host.
DPL_DECLARE_KERNEL(flag_non_finite, floating_each(), void(const Tensor& x, Tensor& flag));

// --- convolution -------------------------------------------------------------------------------
//
// 2-D convolution of x (N, C, H, W) with weights w (O, C/groups, KH, KW) into y (N, O, OH, OW),
// OH = (H + 2*padding - dilation*(KH-1) - 1) / stride + 1 (floor), the same for the width.
// Memory format: in every call, the image tensors (x, y and their gradients) and the weights are
// all contiguous (NCHW) or all channels-last (NHWC strides, Tensor::is_channels_last). The
// image argument decides (x; gx for backward_data): channels-last unless it is also contiguous,
// and a tensor that is both has the same memory order either way. The ops make operands agree.

/// The geometry of a 2-D convolution: for (height, width), the stride, the zero padding added on
/// both sides and the dilation (1: adjacent taps), and the number of channel groups.
struct Conv2dParams {
  std::int64_t stride[2] = {1, 1};
  std::int64_t padding[2] = {0, 0};
  std::int64_t dilation[2] = {1, 1};
  std::int64_t groups = 1;
};

/// y = conv(x, w) + bias, with bias (O,) contiguous, of x's dtype and device, or null (no bias;
/// the dispatcher does not see it, so the caller checks it). y is written (no beta).
DPL_DECLARE_KERNEL(conv2d_forward, floating(),
                   void(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, Tensor& y));
/// gx = beta*gx + the gradient of conv(x, w) with respect to x, given gy.
DPL_DECLARE_KERNEL(conv2d_backward_data, floating(),
                   void(const Tensor& gy, const Tensor& w, const Conv2dParams& p, float beta, Tensor& gx));
/// gw = beta*gw + the gradient of conv(x, w) with respect to w, given gy.
DPL_DECLARE_KERNEL(conv2d_backward_weight, floating(),
                   void(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta, Tensor& gw));
/// y = conv(x, w) (no bias) and, in the same kernel, the sums of y and of y squared per output
/// channel over (N, OH, OW) into sum and sum_of_squares (float32 (O,)): batch normalisation's
/// statistics without a pass of its own over y. Where the device's library has no such fused
/// kernel for the problem it writes nothing and returns false (the caller then runs
/// conv2d_forward). Implemented on the GPU only (cuDNN's convolution with generated statistics);
/// callers ask has(kCuda) first.
DPL_DECLARE_KERNEL(conv2d_forward_sums, any(),
                   bool(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y, Tensor& sum,
                        Tensor& sum_of_squares));
/// For a convolution whose input y is a batch norm's relu(bn(x) + z): g (y's gradient buffer,
/// holding the contributions gathered so far) = (y > 0) ? g + dL/dy of this convolution : 0, and
/// per channel (float32 (C,)) the sums of g and of g · (x − mean), the batch norm's backward
/// reductions, in one kernel. Where the device has no such kernel for the problem it writes nothing
/// and returns false. Implemented on the GPU only (CUTLASS, 1x1 stride-1, 16-bit or float32 as TF32
/// while allowed, on sm_90); callers ask has(kCuda) first.
DPL_DECLARE_KERNEL(conv2d_backward_data_masked_sums, any(),
                   bool(const Tensor& gy, const Tensor& w, const Conv2dParams& p, const Tensor& y, const Tensor& x,
                        const Tensor& mean, Tensor& g, Tensor& sum_g, Tensor& sum_gx));
/// gb (O,) = beta*gb + the sum of gy (N, O, OH, OW; contiguous or channels-last) over N, OH and OW.
DPL_DECLARE_KERNEL(conv2d_backward_bias, floating(), void(const Tensor& gy, float beta, Tensor& gb));

// --- normalization and pooling ----------------------------------------------------------------
// Image tensors are (N, C, H, W) by shape; their strides say the memory format: NCHW
// (contiguous) or channels-last (NHWC: the stride of C is 1, of W is C). Each image tensor may be
// in either format independently, and outputs keep the format they were allocated in. Per-channel
// statistics, scale and shift are float32 (C,) whatever the image dtype.

/// The window of a 2-D pooling: extents, steps and zero padding on each side, all in pixels.
struct Pool2dParams {
  std::int64_t kernel_h, kernel_w;
  std::int64_t stride_h, stride_w;
  std::int64_t pad_h, pad_w;
};

/// Max, or average over the window counting padding (PyTorch's count_include_pad true) or not.
enum class PoolKind { kMax, kAvgIncludePad, kAvgExcludePad };

/// Training-mode batch norm: per channel c, mean and biased variance of x over (N, H, W);
/// y = (x - mean) / sqrt(var + eps) * weight + bias; save_mean = mean, save_invstd =
/// 1 / sqrt(var + eps); running_mean = (1 - momentum) running_mean + momentum mean and
/// running_var likewise with the unbiased variance (PyTorch's convention). Requires N*H*W >= 2.
/// weight and bias are float32, or of any float dtype where batch_norm_act_available(x) (the GPU's
/// channels-last kernels read 16-bit parameters in place).
/// `batches` is BatchNorm's num_batches_tracked (one int64 element on x's device), incremented by
/// one with the running statistics' update: in the kernel that writes them where the device's
/// kernels can (the GPU's channels-last ones), else by increment_count. Zero elements: nothing is
/// counted. The same holds for every training-mode batch norm kernel below.
DPL_DECLARE_KERNEL(batch_norm_train, floating_each().int64_at(5),
                   void(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, float momentum,
                        Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y, Tensor& save_mean,
                        Tensor& save_invstd));
/// Evaluation-mode batch norm: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias.
DPL_DECLARE_KERNEL(batch_norm_infer, floating_each(),
                   void(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                        const Tensor& running_var, float eps, Tensor& y));
/// Gradients of batch_norm_train from the statistics it saved: gx = beta*gx + dL/dx (through the
/// batch statistics); gweight and gbias (C,) are written (beta 0), in weight's dtype (float32 unless
/// batch_norm_act_available(x), as for batch_norm_train).
DPL_DECLARE_KERNEL(batch_norm_backward, floating_each(),
                   void(const Tensor& x, const Tensor& gy, const Tensor& weight, const Tensor& save_mean,
                        const Tensor& save_invstd, float eps, float beta, Tensor& gx, Tensor& gweight,
                        Tensor& gbias));
/// counter (one int64 element) += 1, on its device without a host round trip (BatchNorm's count
/// of training batches where no batch norm kernel counts it: the synchronised statistics).
DPL_DECLARE_KERNEL(increment_count, any(), void(Tensor& counter));
/// True when batch_norm_act_train runs x fused on x's device (the GPU's kernels take channels-last
/// images of any float dtype); always false on the CPU, where the ops compose.
DPL_DECLARE_KERNEL(batch_norm_act_available, any(), bool(const Tensor& x));
/// Training-mode y = relu(batch_norm(x) + z) when `add`, else relu(batch_norm(x)) (z is not
/// read), with the statistics and running updates of batch_norm_train. Requires
/// batch_norm_act_available(x); z and y in x's format; weight and bias of any float dtype. Returns
/// what batch_norm_act_backward needs as `reserve`.
DPL_DECLARE_KERNEL(batch_norm_act_train, floating_each().int64_at(6),
                   Tensor(bool add, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                          float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                          Tensor& y, Tensor& save_mean, Tensor& save_invstd));
/// batch_norm_act_train (relu true; z read when `add`) or batch_norm_train (relu and add false)
/// with the batch statistics from sum and sum_of_squares (float32 (C,)), the sums of x and of x
/// squared per channel over its N*H*W values, instead of a pass over x. Their backward is the
/// same; returns what batch_norm_act_backward needs as `reserve` (unused after batch_norm_train).
/// Channels-last images on the GPU only (callers ask has(kCuda) and batch_norm_act_available(x)
/// first).
DPL_DECLARE_KERNEL(batch_norm_train_from_sums, any(),
                   Tensor(bool relu, bool add, const Tensor& x, const Tensor& z, const Tensor& sum,
                        const Tensor& sum_of_squares, const Tensor& weight, const Tensor& bias, float eps,
                        float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y,
                        Tensor& save_mean, Tensor& save_invstd));
/// Gradients of batch_norm_act_train: gx and gz (only when `add`; else gz is not touched) written
/// in x's format; gweight = param_beta * gweight + dL/dweight and gbias likewise, (C,) in any float
/// dtype (typically the parameters' own gradient buffers, which accumulate across backward passes:
/// no conversion or addition follows). y is read only when `add`: without
/// a residual the ReLU's mask is recomputed from x, bias and the saved statistics, and y may be a
/// zero-element tensor of x's dtype on x's device.
DPL_DECLARE_KERNEL(batch_norm_act_backward, any(),
                   void(bool add, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& reserve,
                        const Tensor& weight, const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd,
                        float eps, Tensor& gx, Tensor& gz, float param_beta, Tensor& gweight, Tensor& gbias));
/// batch_norm_act_backward with `add`, for a gradient g that arrives masked by the ReLU with its
/// reductions (sum_g, sum_gx: float32 (C,), the sums of g and of g · (x − save_mean)) computed
/// where it was completed (conv2d_backward_data_masked_sums): gx written in x's format, gweight and
/// gbias as there; the residual's gradient is g itself (the caller passes it on). GPU only.
DPL_DECLARE_KERNEL(batch_norm_backward_from_sums, any(),
                   void(const Tensor& x, const Tensor& g, const Tensor& sum_g, const Tensor& sum_gx,
                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, Tensor& gx,
                        float param_beta, Tensor& gweight, Tensor& gbias));
/// True when batch_norm_relu_max_pool_train runs x pooled with p on x's device: the GPU's
/// channels-last kernels, where max pooling of x with p runs on them too. GPU only (callers ask
/// has(kCuda) first; elsewhere the ops compose).
DPL_DECLARE_KERNEL(batch_norm_relu_max_pool_available, any(), bool(const Tensor& x, const Pool2dParams& p));
/// Training-mode y = max_pool(relu(batch_norm(x)), p) (a network's stem) with the statistics and
/// running updates of batch_norm_train, from sum and sum_of_squares (as batch_norm_train_from_sums
/// takes them), or from x when they have no elements (stand-ins on x's device); the normalised
/// image is never stored. y
/// channels-last, of pool2d's output shape; returns the winners' indices (kUInt8, y's shape and
/// strides) for batch_norm_relu_max_pool_backward. Requires batch_norm_relu_max_pool_available.
DPL_DECLARE_KERNEL(batch_norm_relu_max_pool_train, any(),
                   Tensor(const Pool2dParams& p, const Tensor& x, const Tensor& sum, const Tensor& sum_of_squares,
                          const Tensor& weight, const Tensor& bias, float eps, float momentum, Tensor& running_mean,
                          Tensor& running_var, Tensor& batches, Tensor& y, Tensor& save_mean, Tensor& save_invstd));
/// Gradients of batch_norm_relu_max_pool_train from its x, y and winners and y's gradient gy: gx
/// written in x's format; gweight and gbias as batch_norm_act_backward's (param_beta).
DPL_DECLARE_KERNEL(batch_norm_relu_max_pool_backward, any(),
                   void(const Pool2dParams& p, const Tensor& x, const Tensor& y, const Tensor& argmax,
                        const Tensor& gy, const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                        const Tensor& save_invstd, Tensor& gx, float param_beta, Tensor& gweight, Tensor& gbias));
/// y (N, C, Ho, Wo) = pooling of x over windows p, with Ho = (H + 2 pad_h - kernel_h) / stride_h + 1
/// (floor) and Wo likewise; the caller checks that every window overlaps the unpadded input.
/// Returns what pool2d_backward needs as `saved` (a backend-specific tensor on x's device: the
/// arg-max workspace on oneDNN, the winners' indices as uint8 for channels-last max pooling on
/// the GPU, y on cuDNN).
DPL_DECLARE_KERNEL(pool2d, floating(), Tensor(PoolKind kind, const Pool2dParams& p, const Tensor& x, Tensor& y));
/// gx = beta*gx + the gradient of pool2d: for max, gy goes to the window's arg-max; for average,
/// spread evenly over the window. x and saved are pool2d's input and result. When saved is of
/// dtype uint8 (the winners' indices), backward reads neither x's values nor its layout (gx gives
/// the shape), and x may be a zero-element tensor of x's dtype on x's device: the caller need not
/// keep the input alive.
DPL_DECLARE_KERNEL(pool2d_backward, any(),
                   void(PoolKind kind, const Pool2dParams& p, const Tensor& x, const Tensor& saved, const Tensor& gy,
                        float beta, Tensor& gx));

/// The layout of a group normalisation, and of a layer normalisation as its special case: x is a
/// contiguous (n, channels, inner) array whose channels form `groups` groups of channels / groups
/// consecutive channels (groups divides channels). Each (sample, group) is one row of
/// channels / groups * inner consecutive elements, normalised by its own mean and variance; the
/// affine weight and bias are per channel. Layer normalisation over the last dimensions is one
/// group with the normalised elements as channels and inner 1.
struct NormGroups {
  std::int64_t n, channels, inner, groups;
};
/// Per row r of NormGroups g (n * groups rows): mean[r] and rstd[r] = 1 / sqrt(biased variance +
/// eps) of the row (float32, (n * groups,)), and y = (x - mean) * rstd * weight[c] + bias[c] for
/// every element of channel c. weight and bias are float32 (channels,); x and y of one float dtype.
DPL_DECLARE_KERNEL(normalize_groups, floating_each(),
                   void(const NormGroups& g, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd));
/// Gradients of normalize_groups from the statistics it saved: gx = beta*gx + dL/dx (through
/// the row statistics), in x's dtype; gweight[c] = sum of gy * xhat and gbias[c] = sum of gy over
/// channel c's elements, float32 (channels,), written (beta 0). gx with zero elements is not
/// computed, nor are gweight and gbias when both have zero elements (no gradient is needed there).
DPL_DECLARE_KERNEL(normalize_groups_backward, floating_each(),
                   void(const NormGroups& g, const Tensor& x, const Tensor& gy, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, float beta, Tensor& gx, Tensor& gweight,
                        Tensor& gbias));

/// y (N, C, Ho, Wo) = the mean of x (N, C, H, W) over each output pixel's adaptive window:
/// rows [floor(i H / Ho), ceil((i + 1) H / Ho)) and columns likewise (PyTorch's rule; windows of
/// neighbours may overlap). x and y contiguous (NCHW); H, W, Ho, Wo >= 1.
DPL_DECLARE_KERNEL(adaptive_avg_pool2d, floating(), void(const Tensor& x, Tensor& y));
/// gx = beta*gx + the gradient of adaptive_avg_pool2d: each element of gy spread evenly over its
/// window (overlapping windows add). gy and gx contiguous; gx's shape gives H and W.
DPL_DECLARE_KERNEL(adaptive_avg_pool2d_backward, floating(), void(const Tensor& gy, float beta, Tensor& gx));

/// The sampling rule of upsample2d: PyTorch's legacy "nearest" (source index floor(dst * scale))
/// or bilinear (the two nearest source pixels along each axis, weighted by distance).
enum class UpsampleMode { kNearest, kBilinear };
/// The geometry of upsample2d: the mode, whether bilinear maps the corner pixels' centres onto
/// each other (align_corners), and per axis the source step per output pixel as PyTorch computes
/// it (1 / scale_factor when one was given, else in / out; with align_corners (in - 1) / (out - 1),
/// 0 for out == 1). resampling_math.hpp holds the index rule both backends share.
struct Upsample2dParams {
  UpsampleMode mode = UpsampleMode::kNearest;
  bool align_corners = false;
  float scale_h = 1.f, scale_w = 1.f;
};
/// y (N, C, Ho, Wo) = x (N, C, H, W) resampled by p (PyTorch's upsample_nearest2d and
/// upsample_bilinear2d). x and y contiguous (NCHW); H, W, Ho, Wo >= 1.
DPL_DECLARE_KERNEL(upsample2d, floating(), void(const Upsample2dParams& p, const Tensor& x, Tensor& y));
/// gx = beta*gx + the gradient of upsample2d: each input pixel gathers the gradients of the
/// output pixels that read it, times their weights (no atomics; the same order on every device).
/// gy and gx contiguous; gx's shape gives H and W.
DPL_DECLARE_KERNEL(upsample2d_backward, floating(),
                   void(const Upsample2dParams& p, const Tensor& gy, float beta, Tensor& gx));

// --- activations, dropout, softmax over the last dimension, mean squared error ----------------

/// The pointwise activations of `activation` and `activation_backward`.
enum class Activation {
  kLeakyRelu,  // x > 0 ? x : slope * x (NaN stays NaN)
  kSigmoid,    // 1 / (1 + exp(-x))
  kTanh,       // tanh(x)
  kGelu,       // x * Phi(x) with Phi the standard normal CDF (the exact erf form)
  kGeluTanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate='tanh'
  kExp,        // exp(x)
  kLog,        // log(x)
  kSqrt,       // sqrt(x)
  kRsqrt,      // 1 / sqrt(x)
  kAbs,        // |x| (derivative sign(x), 0 at 0)
  kPow,        // x^slope (derivative slope * x^(slope-1), 0 when slope == 0)
  kClampMin,   // max(x, slope); derivative 1 where x >= slope, else 0 (NaN stays NaN)
  kClampMax,   // min(x, slope); derivative 1 where x <= slope, else 0 (NaN stays NaN)
  kClamp,      // min(max(x, slope), upper) in one pass; derivative 1 where x >= slope and
               // max(x, slope) <= upper, else 0 (NaN stays NaN)
};

/// True when `activation_backward` reads the activation's output y; false when it reads its input x.
constexpr bool backward_reads_output(Activation a) {
  return a == Activation::kSigmoid || a == Activation::kTanh || a == Activation::kExp || a == Activation::kSqrt ||
         a == Activation::kRsqrt;
}

// Marks the helpers below callable from CUDA kernels too, where nvcc compiles this header.
#if defined(__CUDACC__)
#define DPL_HOST_DEVICE __host__ __device__
#else
#define DPL_HOST_DEVICE
#endif

/// Whether dropout with probability p in [0, 1) and `seed` keeps flat index i: splitmix64 of
/// (seed, i) compared with p in 32-bit fixed point. Integer-only, so host and device agree bit for bit.
DPL_HOST_DEVICE inline bool dropout_keeps(std::uint64_t seed, std::uint64_t i, float p) {
  std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const auto threshold = static_cast<std::uint64_t>(static_cast<double>(p) * 4294967296.0);
  return (z >> 32) >= threshold;
}

/// y = f(x) elementwise, any rank; `slope`: leaky ReLU's slope, pow's exponent, clamp's (lower)
/// bound, else unused; `upper`: kClamp's upper bound, else unused.
DPL_DECLARE_KERNEL(activation, floating(), void(Activation f, float slope, float upper, const Tensor& x, Tensor& y));
/// gx = beta*gx + gy * f'(x), any rank; slope and upper as for `activation`. `saved` is f's output
/// y when backward_reads_output(f), its input x otherwise (the cheaper form of each derivative).
DPL_DECLARE_KERNEL(activation_backward, floating(),
                   void(Activation f, float slope, float upper, const Tensor& saved, const Tensor& gy, float beta,
                        Tensor& gx));
/// y = beta*y + x * keep(i) / (1 - p), any rank, where keep(i) is 1 with probability 1 - p for flat
/// index i: a counter-based hash of (seed, i), identical on every device, so that backward
/// (the same call on the gradient) and the CPU and GPU draw the same mask. Requires p in [0, 1).
DPL_DECLARE_KERNEL(dropout, floating(), void(float p, std::uint64_t seed, const Tensor& x, float beta, Tensor& y));
/// y = softmax (log_softmax when `log`) of every row of x's last dimension; x any rank >= 1.
DPL_DECLARE_KERNEL(softmax, floating(), void(bool log, const Tensor& x, Tensor& y));
/// gx = beta*gx + the gradient of softmax (log: log_softmax) through its output y, row-wise:
/// y * (gy - sum(gy * y)), or for log, gy - exp(y) * sum(gy).
DPL_DECLARE_KERNEL(softmax_backward, floating(), void(bool log, const Tensor& y, const Tensor& gy, float beta, Tensor& gx));
/// out (int64, x's shape without the last dimension) = index of the largest value of each row of
/// x's last dimension, the first on ties; NaN counts as larger than every number. x float, rank >= 1.
DPL_DECLARE_KERNEL(argmax, any(), void(const Tensor& x, Tensor& out));
/// loss (1 element) = mean of (x - target)^2 over all elements (accumulated in double).
DPL_DECLARE_KERNEL(mse, floating(), void(const Tensor& x, const Tensor& target, Tensor& loss));
/// g = beta*g + alpha * gloss[0] * 2 (x - target) / numel: the gradient for x (alpha 1) or for the
/// target (alpha -1).
DPL_DECLARE_KERNEL(mse_backward, floating(),
                   void(const Tensor& x, const Tensor& target, const Tensor& gloss, float alpha, float beta, Tensor& g));

// --- elementwise selection, reductions along a dimension, losses with a reduction ------------

/// out = a where cond != 0, else b; cond (uint8, 0 or 1), a, b and out all of out's rank with
/// extents equal to out's or 1 (broadcast), all contiguous; a, b and out of one float dtype.
/// The dispatcher checks devices only; the op checks the dtypes.
DPL_DECLARE_KERNEL(where, any(), void(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out));

/// What reduce_dim computes along the reduced dimension.
enum class ReduceKind { kSum, kMax, kMin };

/// x (outer, n, inner), out (outer, inner): out = alpha * sum over n for kSum (float32
/// accumulation), the largest (kMax) or smallest (kMin) value for the others, NaN winning over
/// every number and the first index winning ties; `indices` (int64, (outer, inner), not seen by
/// the dispatcher) receives that index for kMax and kMin and is not touched for kSum (may be
/// null). Requires n >= 1 for kMax and kMin.
DPL_DECLARE_KERNEL(reduce_dim, floating(),
                   void(ReduceKind kind, float alpha, const Tensor& x, Tensor& out, Tensor* indices));
/// The gradient of reduce_dim: gx (outer, n, inner) = beta*gx + alpha * gy[o, i] broadcast over n
/// (kSum), or gy[o, i] at n == indices[o, i] and 0 elsewhere (kMax, kMin; indices as reduce_dim
/// wrote them).
DPL_DECLARE_KERNEL(reduce_dim_backward, floating(),
                   void(ReduceKind kind, float alpha, const Tensor& gy, const Tensor* indices, float beta, Tensor& gx));

/// The pointwise losses of pointwise_loss, each with PyTorch's definition.
enum class PointwiseLoss {
  kMse,            // (x - t)^2
  kL1,             // |x - t|
  kSmoothL1,       // 0.5 (x - t)^2 / param where |x - t| < param, else |x - t| - 0.5 param
  kBce,            // -(t log x + (1 - t) log(1 - x)), each log clamped to >= -100; x in [0, 1]
  kBceWithLogits,  // (1 - t) x + (1 + (w - 1) t) (log1p(exp(-|x|)) + max(-x, 0)), w the pos_weight
};
/// How a loss's per-element values become its result.
enum class LossReduction { kNone, kMean, kSum };

/// out = the per-element loss of x against target (same shape), reduced: out has x's shape for
/// kNone, else one element (the sum, or the sum / numel; accumulated in double). pos_weight
/// (kBceWithLogits only; null for 1 everywhere; not seen by the dispatcher, x's dtype and device)
/// has 1 element or x's last extent and is broadcast over the rows of x's last dimension.
DPL_DECLARE_KERNEL(pointwise_loss, floating(),
                   void(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                        const Tensor* pos_weight, LossReduction reduction, Tensor& out));
/// g = beta*g + alpha * gy * d loss / d x elementwise, with gy of x's shape or one element
/// (broadcast). The gradient for the target of kMse, kL1 and kSmoothL1 is this with alpha negated.
DPL_DECLARE_KERNEL(pointwise_loss_backward, floating(),
                   void(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                        const Tensor* pos_weight, const Tensor& gy, float alpha, float beta, Tensor& g));
/// Negative log-likelihood: logp (N, C, K) of a float dtype, labels (N, K) int32 or int64 on its
/// device (the op checks the dtypes); out (N, K) = -logp[n, label, k] (0 where label ==
/// ignore_index) for kNone, else one element: the sum, or the sum over the counted elements
/// divided by their count (NaN when none counts, as PyTorch). total (float32, one element) =
/// that count. A label outside [0, C) that is not ignore_index makes its element NaN.
DPL_DECLARE_KERNEL(nll_loss, any(),
                   void(const Tensor& logp, const Tensor& labels, std::int64_t ignore_index, LossReduction reduction,
                        Tensor& out, Tensor& total));
/// glogp (N, C, K) = beta*glogp + the gradient of nll_loss given gy (out's shape) and the total
/// it wrote: -gy (divided by total for kMean) at [n, label, k] for counted elements, 0 elsewhere.
DPL_DECLARE_KERNEL(nll_loss_backward, any(),
                   void(const Tensor& labels, std::int64_t ignore_index, LossReduction reduction, const Tensor& gy,
                        const Tensor& total, float beta, Tensor& glogp));

// --- attention ---------------------------------------------------------------------------------
//
// Scaled dot-product attention of q (B, H, Tq, D), k (B, H, Tk, D) and v (B, H, Tk, Dv), Tk >= 1:
// query row i of each (b, h) gets p_ij = softmax_j(scale * q_i . k_j) over the keys it sees (all,
// or j <= i when causal: PyTorch's top-left alignment) and out_i = sum_j p_ij v_j. q, k and v
// share one float dtype; they, out, gout and the gradients may have any strides whose last one is
// 1 (an output laid out (B, Tq, H, Dv), as PyTorch's flash attention lays it, is a view of rows of
// width H * Dv: no transpose copy before the output projection); lse is contiguous. The softmax,
// its statistics and every sum are float32 whatever the dtype.

/// The attention of one call: the causal mask, the scale of the scores, and whether a GPU may run
/// it on cuDNN's fused flash-attention kernels where the build has them and cuDNN accepts the
/// problem (false: dpl's own kernels, as for every call under DPL_ATTENTION=plain).
struct SdpaParams {
  bool causal = false;
  float scale = 1.f;
  bool allow_fused = true;
};
/// out (B, H, Tq, Dv) = the attention of q, k, v; lse (float32, (B, H, Tq)) = per query row the
/// natural log of the softmax's denominator, log sum_j exp(scale * q_i . k_j) over the keys the row
/// sees: all that sdpa_backward needs to recompute the probabilities (no (Tq, Tk) matrix is kept).
DPL_DECLARE_KERNEL(sdpa_forward, floating_each(),
                   void(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        Tensor& lse));
/// The gradients of sdpa_forward from its out and lse and gout (out's gradient): gq = beta*gq +
/// dL/dq, gk and gv likewise, each with its input's shape and the inputs' dtype. All three are
/// computed.
DPL_DECLARE_KERNEL(sdpa_backward, floating_each(),
                   void(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& gout, const Tensor& lse, float beta, Tensor& gq, Tensor& gk, Tensor& gv));
/// Whether sdpa_forward and sdpa_backward run these operands on cuDNN's fused kernels: a GPU, a
/// build with cuDNN's frontend, p.allow_fused, DPL_ATTENTION not plain, and cuDNN accepting both
/// graphs (built and cached on the first question). Always false on the CPU.
DPL_DECLARE_KERNEL(sdpa_fused, any(), bool(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v));

// --- between devices ---------------------------------------------------------------------------

/// Copies a contiguous tensor to a contiguous tensor of the same shape and dtype on another
/// device (host <-> GPU, GPU <-> GPU). Defined by the CUDA backend; throws dpl::Error without it.
void copy_between_devices(const Tensor& src, Tensor& dst);

}  // namespace dpl::backend

// --- image normalisation (the data pipeline's last step, on the device that trains) ------------

namespace dpl::backend {

/// Per-channel mean and std of normalize_images, in pixel units (0..255), passed by value so that
/// a launch needs no device copy of them. Entries from `channels` on are not read.
struct ImageNormalization {
  static constexpr int kMaxChannels = 16;
  int channels = 0;
  float mean[kMaxChannels] = {};
  float std[kMaxChannels] = {};
};

/// out (N, C, H, W) = (float(images) - mean[c]) / std[c], computed in float32 exactly as
/// data::normalize_to_float does (a subtraction, then a division), then rounded once to out's
/// dtype (16-bit: nearest even). images is (N, H, W, C) uint8, contiguous (packed NHWC); out is
/// float32, bfloat16 or float16, contiguous (NCHW) or channels-last (then the same element order
/// as images: no transpose); C == norm.channels <= kMaxChannels and every std non-zero. The
/// caller (data::normalize_images) checks all of this; the dispatcher checks only the device.
DPL_DECLARE_KERNEL(normalize_images, any(), void(const Tensor& images, const ImageNormalization& norm, Tensor& out));

}  // namespace dpl::backend
