// normalize_images on the GPU: 8-bit NHWC images, just copied from the host, to float32, bfloat16
// or float16 (N, C, H, W) in either memory format, on the compute stream. One grid-stride pass:
// each thread writes output elements in memory order and reads the byte each comes from, so
// the writes coalesce; for channels-last output the reads do too (the same order). The arithmetic
// is data::normalize_to_float's, a subtraction then an IEEE division in float32 (nvcc's default
// -prec-div), so float32 results match the CPU bit for bit.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

// ============================================================================================
// kernels
// ============================================================================================

template <typename T>
__global__ void normalize_channels_last_kernel(const std::uint8_t* in, T* out, std::int64_t n, int channels,
                                               ImageNormalization norm) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int c = static_cast<int>(i % channels);
    out[i] = from_float<T>((static_cast<float>(in[i]) - norm.mean[c]) / norm.std[c]);
  }
}

// Output element i = ((b * C + c) * HW + p) comes from byte (b * HW + p) * C + c.
template <typename T>
__global__ void normalize_nchw_kernel(const std::uint8_t* in, T* out, std::int64_t n, std::int64_t hw, int channels,
                                      ImageNormalization norm) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t p = i % hw;
    const std::int64_t bc = i / hw;
    const int c = static_cast<int>(bc % channels);
    const std::int64_t b = bc / channels;
    out[i] = from_float<T>((static_cast<float>(in[(b * hw + p) * channels + c]) - norm.mean[c]) / norm.std[c]);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

void launch_normalize_images(const std::uint8_t* in, void* out, DType out_dtype, std::int64_t n, std::int64_t hw,
                             bool channels_last, const ImageNormalization& norm, int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  with_float_type(out_dtype, "normalize_images", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    if (channels_last) {
      normalize_channels_last_kernel<T><<<grid, kThreads, 0, stream>>>(in, o, n, norm.channels, norm);
    } else {
      normalize_nchw_kernel<T><<<grid, kThreads, 0, stream>>>(in, o, n, hw, norm.channels, norm);
    }
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

void normalize_images_cuda(const Tensor& images, const ImageNormalization& norm, Tensor& out) {
  CudaDevice& d = cuda_device_of(images);
  cuda_detail::DeviceGuard guard(d.device());
  const bool channels_last = out.memory_format() == MemoryFormat::kChannelsLast;
  cuda_detail::launch_normalize_images(static_cast<const std::uint8_t*>(images.raw_data()), out.raw_data(),
                                       out.dtype(), images.numel(), images.size(1) * images.size(2), channels_last,
                                       norm, d.device(), d.stream());
}

}  // namespace

DPL_REGISTER_KERNEL(normalize_images, kCuda, normalize_images_cuda);

}  // namespace dpl::backend
