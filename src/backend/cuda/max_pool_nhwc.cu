#include "backend/cuda/max_pool_nhwc.hpp"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/max_pool_window.cuh"

namespace dpl::backend::cuda_detail {

namespace {

// One thread per output pixel and V-channel vector: scans the window (window_max), writes the
// value and the winner's index. Index is 32-bit where every offset fits (the pixel's
// decomposition is then 32-bit division, not 64-bit).
template <typename T, int V, typename Index>
__global__ void max_pool_forward_kernel(const T* x, PoolGeometry g, Index packs, T* y, std::uint8_t* argmax) {
  for (Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<Index>(gridDim.x) * blockDim.x) {
    float best[V];
    ArgmaxBytes<V> win;
    window_max<T, V>(x, g, pixel_of<V>(p, g.c, g.oh, g.ow), [](float(&)[V]) {}, best, win);
    const Index out = p * V;  // (n, oy, ox, c) in channels-last order is p * V
    store_vec<V>(y + out, best);
    store_argmax<V>(argmax + out, win);
  }
}

// One thread per input pixel and V-channel vector: gathers the gradients of the outputs whose
// windows hold this pixel and chose it (gather_window_grads).
template <typename T, int V, typename Index, int W>
__global__ void max_pool_backward_kernel(const std::uint8_t* argmax, const T* gy, PoolGeometry g, Index packs,
                                         float beta, T* gx) {
  for (Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Pixel<Index> in = pixel_of<V>(p, g.c, g.h, g.w);
    float acc[V];
    gather_window_grads<T, V, Index, W>(argmax, gy, g, in.n, in.y, in.x, in.cv, acc);
    const Index i = p * V;
    if (beta != 0.f) {
      float prev[V];
      load_vec<V>(gx + i, prev);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += beta * prev[j];
    }
    store_vec<V>(gx + i, acc);
  }
}

bool packed_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides()[1] == 1 && t.strides()[3] == t.size(1) &&
         t.strides()[2] == t.size(3) * t.size(1) && t.strides()[0] == t.size(2) * t.size(3) * t.size(1);
}

}  // namespace

bool max_pool_nhwc_fits(const Tensor& x, const Pool2dParams& p) {
  return packed_channels_last(x) && is_float_dtype(x.dtype()) && p.kernel_h * p.kernel_w <= 255 &&
         x.size(2) < (std::int64_t{1} << 30) && x.size(3) < (std::int64_t{1} << 30) &&
         x.size(1) < (std::int64_t{1} << 30);
}

void max_pool_nhwc(const Pool2dParams& p, const Tensor& x, Tensor& y, Tensor& argmax) {
  DPL_CHECK(max_pool_nhwc_fits(x, p) && packed_channels_last(y) && argmax.strides() == y.strides() &&
                argmax.dtype() == kUInt8,
            "max_pool (channels-last): expected channels-last x and y and a uint8 argmax in y's strides");
  on_device_typed(x, "max_pool (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const PoolGeometry g = pool_geometry(p, x.shape(), y.shape());
    const T* xp = in_ptr<T>(x);
    T* yp = out_ptr<T>(y);
    auto* ap = static_cast<std::uint8_t*>(argmax.raw_data());
    with_pack_width<T>(g.c, {xp, yp, ap}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const std::int64_t packs = y.numel() / V;
      with_index_type(std::max(x.numel(), y.numel()), [&](auto index) {
        using Index = decltype(index);
        max_pool_forward_kernel<T, V, Index><<<grid_for(packs, kThreads, d.device()), kThreads, 0, d.stream()>>>(
            xp, g, static_cast<Index>(packs), yp, ap);
      });
      DPL_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void max_pool_nhwc_backward(const Pool2dParams& p, const Tensor& argmax, const Tensor& gy, float beta, Tensor& gx) {
  DPL_CHECK(packed_channels_last(gx) && gy.strides() == argmax.strides() && argmax.dtype() == kUInt8 &&
                gy.dtype() == gx.dtype(),
            "max_pool backward (channels-last): expected channels-last gx, gy in the argmax's strides and one dtype");
  on_device_typed(gx, "max_pool backward (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const PoolGeometry g = pool_geometry(p, gx.shape(), gy.shape());
    const T* gyp = in_ptr<T>(gy);
    T* gxp = out_ptr<T>(gx);
    const auto* ap = static_cast<const std::uint8_t*>(argmax.raw_data());
    with_pack_width<T>(g.c, {gyp, gxp, ap}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const std::int64_t packs = gx.numel() / V;
      with_index_type(std::max(gx.numel(), gy.numel()), [&](auto index) {
        using Index = decltype(index);
        const unsigned blocks = grid_for(packs, kThreads, d.device());
        if (at_most_two_windows_a_pixel(g))
          max_pool_backward_kernel<T, V, Index, 2><<<blocks, kThreads, 0, d.stream()>>>(
              ap, gyp, g, static_cast<Index>(packs), beta, gxp);
        else
          max_pool_backward_kernel<T, V, Index, 0><<<blocks, kThreads, 0, d.stream()>>>(
              ap, gyp, g, static_cast<Index>(packs), beta, gxp);
      });
      DPL_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace dpl::backend::cuda_detail
