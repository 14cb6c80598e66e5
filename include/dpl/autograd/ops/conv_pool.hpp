#pragma once
// Convolution, pooling and resampling of (N, C, H, W) images.
// Image inputs are 4-D (N, C, H, W) by shape, in NCHW (contiguous) or channels-last memory
// (Tensor::memory_format); outputs keep the input's format. Other strides are first copied to
// NCHW.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <array>
#include <cstdint>
#include <optional>

#include "dpl/autograd/ops/batch_norm.hpp"
#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"

namespace dpl {

/// A (height, width) pair of convolution settings.
using Conv2dPair = std::array<std::int64_t, 2>;

/// 2-D cross-correlation, as PyTorch's conv2d: x (N, C, H, W), weight (O, C/groups, KH, KW), bias
/// (O,) or undefined (no bias), one float dtype and device for all. Zero padding on both sides,
/// strides and dilations at least 1; C and O divisible by groups. Returns (N, O, OH, OW) with
/// OH = (H + 2*padding - dilation*(KH-1) - 1) / stride + 1 (floor), likewise OW, which must be at
/// least 1. Requires oneDNN (CPU) or cuDNN (GPU) in the build; throws dpl::Error without them.
///
/// Memory format: a channels-last input (Tensor::memory_format() is kChannelsLast) gives a
/// channels-last output and is computed in NHWC with the weight converted to channels-last if it
/// is not (keep weights channels-last to avoid that copy); any other input is computed in NCHW.
/// Gradients land in their buffers' layout. 16-bit math accumulates in float32.
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias = Variable(),
                Conv2dPair stride = {1, 1}, Conv2dPair padding = {0, 0}, Conv2dPair dilation = {1, 1},
                std::int64_t groups = 1);

/// conv2d without a bias that, where the device's library fuses it (cuDNN's convolution with
/// generated statistics: GPU, float16, channels-last, one group), also computes its output's ChannelSums
/// into `sums` in the same kernel, for a batch_norm of the output to take instead of a pass of
/// its own. Elsewhere `sums` is left undefined and this is conv2d. The output and its gradients
/// are conv2d's (cuDNN may pick another engine for the fused kernel, so the bits can differ).
Variable conv2d_with_sums(const Variable& x, const Variable& weight, ChannelSums& sums, Conv2dPair stride = {1, 1},
                          Conv2dPair padding = {0, 0}, Conv2dPair dilation = {1, 1}, std::int64_t groups = 1);

/// 2-D transposed convolution, as PyTorch's conv_transpose2d (the gradient of conv2d with respect
/// to its input): x (N, C, H, W), weight (C, O/groups, KH, KW), bias (O,) or undefined (no bias),
/// one float dtype and device for all. Returns (N, O, OH, OW) with OH = (H - 1)*stride -
/// 2*padding + dilation*(KH-1) + output_padding + 1, likewise OW, which must be at least 1.
/// Requires strides and dilations >= 1, padding >= 0, 0 <= output_padding < stride (PyTorch also
/// allows output_padding < dilation; dpl does not), and C divisible by groups. Runs on conv2d's
/// kernels (its forward is conv2d's backward-data), so it requires oneDNN (CPU) or cuDNN (GPU) in
/// the build, and follows conv2d's memory formats: a channels-last input gives a channels-last
/// output. 16-bit math accumulates in float32.
Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias = Variable(),
                          Conv2dPair stride = {1, 1}, Conv2dPair padding = {0, 0}, Conv2dPair output_padding = {0, 0},
                          std::int64_t groups = 1, Conv2dPair dilation = {1, 1});

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
/// max_pool2d(batch_norm_relu(x, weight, bias, running_mean, running_var, training, momentum, eps,
/// sums, num_batches_tracked), kernel, stride, padding): a network's stem, with the two ops'
/// requirements and results (the running statistics and the batch counter updated as
/// batch_norm_relu updates them). In training on the GPU, for
/// channels-last x, one pass after the statistics normalises each window's values, applies the
/// ReLU and pools them, and backward gathers the pooled gradient in its passes over x: neither the
/// normalised image nor its gradient is ever stored. Elsewhere the two ops compose.
Variable batch_norm_relu_max_pool2d(const Variable& x, const Variable& weight, const Variable& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0),
                                    double momentum = 0.1, double eps = 1e-5, const ChannelSums* sums = nullptr,
                                    const Tensor& num_batches_tracked = Tensor());
/// Mean over the same windows as max_pool2d (same requirements and output shape). With
/// count_include_pad (PyTorch's default) padded zeros count in the divisor; without, only the
/// input pixels in the window do.
Variable avg_pool2d(const Variable& x, Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0),
                    bool count_include_pad = true);
/// Mean over H and W: (N, C, H, W) -> (N, C). Requires a 4-D float input with H, W >= 1.
Variable global_avg_pool2d(const Variable& x);
/// Mean over adaptive windows (PyTorch's F.adaptive_avg_pool2d): (N, C, H, W) -> (N, C, Ho, Wo)
/// for output_size {Ho, Wo}, output pixel (i, j) the mean of rows [floor(i H / Ho),
/// ceil((i + 1) H / Ho)) and columns likewise, so neighbouring windows may overlap and an output
/// larger than the input repeats pixels. Requires a 4-D float input with H, W >= 1 and output
/// extents >= 1. A channels-last input is read through a contiguous copy; the result is
/// contiguous.
Variable adaptive_avg_pool2d(const Variable& x, Size2d output_size);

/// Channel dropout, as PyTorch's F.dropout2d on (N, C, H, W): while `training` and p > 0, each
/// (sample, channel) plane is zeroed whole with probability p and the rest are scaled by
/// 1 / (1 - p); otherwise x itself is returned. Requires a 4-D float input and p in [0, 1). The
/// mask, one value per (n, c), is dpl::dropout's of an (N, C, 1, 1) tensor of ones (one 64-bit
/// seed from `gen` per call, the same on the CPU and the GPU), and backward multiplies by the same
/// mask. The result is contiguous (the product broadcasts the mask over H and W).
Variable dropout2d(const Variable& x, float p, Generator& gen, bool training = true);

/// Height and width scale factors of a resampling; one number means the same for both.
struct Scale2d {
  /// {both, both}, and {height, width}; the ops check the values.
  Scale2d(double both) : h(both), w(both) {}  // NOLINT: implicit, so that 2.0 means {2.0, 2.0}
  Scale2d(double height, double width) : h(height), w(width) {}
  double h, w;
};

/// How interpolate computes an output pixel from the input's.
enum class InterpolateMode {
  kNearest,   ///< PyTorch's legacy 'nearest': source index floor(dst * in / out) (with a scale
              ///< factor s: floor(dst / s)), clamped to the last pixel
  kBilinear,  ///< the four nearest source pixels weighted by distance (PyTorch's 'bilinear')
};

/// Resamples x (N, C, H, W) to (N, C, Ho, Wo), as PyTorch's F.interpolate for 4-D input: give
/// exactly one of `size` (Ho, Wo >= 1) and `scale_factor` (> 0; then Ho = floor(H * scale.h),
/// likewise Wo, which must be at least 1, and the source step is 1 / scale as in PyTorch, which can
/// pick other pixels than size = (Ho, Wo) would). Bilinear maps pixel centres onto each other
/// unless `align_corners`, which maps the corner pixels' centres (and ignores the scale factor's
/// step, as PyTorch does); `align_corners` requires kBilinear. Requires a 4-D float input with H,
/// W >= 1. A channels-last input is read through a contiguous copy; the result is contiguous. The
/// gradient is the transpose of the same weights; 16-bit math in float32.
Variable interpolate(const Variable& x, std::optional<Size2d> size, std::optional<Scale2d> scale_factor = std::nullopt,
                     InterpolateMode mode = InterpolateMode::kNearest, bool align_corners = false);

}  // namespace dpl
