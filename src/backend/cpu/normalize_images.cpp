// normalize_images on the CPU: 8-bit NHWC images to float32, bfloat16 or float16 (N, C, H, W) in
// either memory format. Each output element is computed straight from its input byte, so the
// float32 result is bit for bit what data::normalize_to_float computes and a 16-bit result is that
// value rounded once.
#include <cstdint>

#include "backend/cpu/cpu.hpp"
#include "core/half.hpp"

namespace dpl::backend::cpu {

namespace {

float normalized(std::uint8_t x, const ImageNormalization& norm, std::int64_t c) {
  return (static_cast<float>(x) - norm.mean[c]) / norm.std[c];
}

// Writes element i of the output's memory order from store(i, value); `source` maps it to the
// input byte and its channel.
template <typename Store>
void normalize_into(const Tensor& images, const ImageNormalization& norm, bool channels_last, Store store) {
  const std::uint8_t* in = images.data<std::uint8_t>();
  const std::int64_t h = images.size(1), w = images.size(2), c = images.size(3);
  const std::int64_t hw = h * w;
  const std::int64_t n = images.numel();
  if (channels_last) {
    // The output's memory order is the input's: element i is byte i, channel i % C.
    for_each_index(n, [&](std::int64_t i) { store(i, normalized(in[i], norm, i % c)); });
    return;
  }
  // NCHW: element i = ((b * C + k) * H * W + p) reads byte (b * H * W + p) * C + k.
  for_each_index(n, [&](std::int64_t i) {
    const std::int64_t p = i % hw;
    const std::int64_t k = (i / hw) % c;
    const std::int64_t b = i / (hw * c);
    store(i, normalized(in[(b * hw + p) * c + k], norm, k));
  });
}

void normalize_images_cpu(const Tensor& images, const ImageNormalization& norm, Tensor& out) {
  if (images.numel() == 0) return;
  const bool channels_last = out.memory_format() == MemoryFormat::kChannelsLast;
  switch (out.dtype()) {
    case DType::kFloat32: {
      float* o = out.data<float>();
      normalize_into(images, norm, channels_last, [o](std::int64_t i, float v) { o[i] = v; });
      break;
    }
    case DType::kBFloat16: {
      auto* o = static_cast<std::uint16_t*>(out.raw_data());
      normalize_into(images, norm, channels_last,
                     [o](std::int64_t i, float v) { o[i] = dpl::detail::float_to_bfloat16(v); });
      break;
    }
    case DType::kFloat16: {
      auto* o = static_cast<std::uint16_t*>(out.raw_data());
      normalize_into(images, norm, channels_last,
                     [o](std::int64_t i, float v) { o[i] = dpl::detail::float_to_float16(v); });
      break;
    }
    default: DPL_FAIL("normalize_images: expected out of dtype float32, bfloat16 or float16, got ", out.dtype());
  }
}

}  // namespace

DPL_REGISTER_KERNEL(normalize_images, kCpu, normalize_images_cpu);

}  // namespace dpl::backend::cpu
