#pragma once
// Normalisation of 8-bit image batches into the float tensors a model takes, on whichever device
// the batch is: the data pipeline moves uint8 (a quarter of float32's bytes) and turns it into
// float32, bfloat16 or float16 where the model runs, in the model's memory format.

#include <vector>

#include "dpl/core/dtype.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// Most channels normalize_images takes (mean and std travel with the kernel launch).
inline constexpr int kMaxNormalizeChannels = 16;

/// (x - mean[c]) / std[c] of uint8 images, on their device (CPU or GPU; on a GPU, queued on its
/// compute stream without a host wait).
///
/// Requires: images of dtype uint8, shape (N, H, W, C), contiguous (packed NHWC, as the
/// ImageLoader's batches), with 1 <= C <= kMaxNormalizeChannels; mean and std in pixel units
/// (0..255), each of C values or of one used for every channel, every std non-zero; dtype
/// float32, bfloat16 or float16. Throws dpl::Error saying what was expected and what came
/// otherwise.
///
/// Ensures: a new tensor of shape (N, C, H, W) and `dtype` on images' device, channels-last
/// (format kChannelsLast: the input's element order, so no transpose) or contiguous NCHW
/// (kContiguous). Each value is computed in float32 exactly as normalize_to_float computes it (so
/// float32 results equal normalize_to_float's bit for bit, on the GPU too) and rounded once to
/// `dtype` (nearest even).
Tensor normalize_images(const Tensor& images, const std::vector<float>& mean, const std::vector<float>& std,
                        DType dtype = kFloat32, MemoryFormat format = MemoryFormat::kChannelsLast);

}  // namespace dpl::data
