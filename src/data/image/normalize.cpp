#include "dpl/data/image/normalize.hpp"

#include "backend/kernels.hpp"
#include "data/image/channel_values.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

static_assert(kMaxNormalizeChannels == backend::ImageNormalization::kMaxChannels,
              "the public channel limit is the kernel's");

Tensor normalize_images(const Tensor& images, const std::vector<float>& mean, const std::vector<float>& std,
                        DType dtype, MemoryFormat format) {
  const char* op = "normalize_images";
  DPL_CHECK(images.defined(), op, ": expected uint8 images of shape (N, H, W, C), got an undefined tensor");
  DPL_CHECK(images.dtype() == kUInt8, op, ": expected images of dtype uint8, got ", images.dtype(),
            " (the tensor is normalised already, or not an 8-bit image batch)");
  DPL_CHECK(images.dim() == 4, op, ": expected images of shape (N, H, W, C), got shape ", shape_str(images.shape()));
  DPL_CHECK(images.is_contiguous(), op, ": expected packed (contiguous) NHWC images, got shape ",
            shape_str(images.shape()), " with strides ", shape_str(images.strides()));
  const std::int64_t channels = images.size(3);
  DPL_CHECK(channels >= 1 && channels <= kMaxNormalizeChannels, op, ": expected 1 to ", kMaxNormalizeChannels,
            " channels (the last extent of (N, H, W, C)), got shape ", shape_str(images.shape()));
  DPL_CHECK(is_float_dtype(dtype), op, ": expected an output dtype float32, bfloat16 or float16, got ", dtype);
  const detail::ChannelValues values = detail::per_channel(op, mean, std, static_cast<int>(channels));

  backend::ImageNormalization norm;
  norm.channels = static_cast<int>(channels);
  for (int c = 0; c < norm.channels; ++c) {
    norm.mean[c] = values.mean[static_cast<std::size_t>(c)];
    norm.std[c] = values.std[static_cast<std::size_t>(c)];
  }
  const Shape nchw{images.size(0), channels, images.size(1), images.size(2)};
  const TensorOptions options(dtype, images.device());
  Tensor out = format == MemoryFormat::kChannelsLast ? Tensor::empty_channels_last(nchw, options)
                                                     : Tensor::empty(nchw, options);
  backend::normalize_images(images, norm, out);
  return out;
}

}  // namespace dpl::data
