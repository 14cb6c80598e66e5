#include "backend/cuda/max_pool_nhwc.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace dpl::backend::cuda_detail {

namespace {

struct PoolGeometry {
  int h, w, c, oh, ow;  // input and output sizes, channels
  int kh, kw, sh, sw, ph, pw;
};

// The V argmax bytes of a thread's channel vector move as one access of V bytes (their offset is
// a multiple of V): byte by byte they were eight load or store instructions per thread, and the
// backward pass reads up to four such vectors per pixel.
template <int V>
struct ArgmaxBytes {
  using Word = std::conditional_t<V == 8, uint2, std::conditional_t<V == 4, std::uint32_t,
                                  std::conditional_t<V == 2, std::uint16_t, std::uint8_t>>>;
  union {
    Word word;
    std::uint8_t b[V];
  };
};
template <int V>
__device__ __forceinline__ ArgmaxBytes<V> load_argmax(const std::uint8_t* p) {
  ArgmaxBytes<V> r;
  r.word = *reinterpret_cast<const typename ArgmaxBytes<V>::Word*>(p);
  return r;
}
template <int V>
__device__ __forceinline__ void store_argmax(std::uint8_t* p, const ArgmaxBytes<V>& r) {
  *reinterpret_cast<typename ArgmaxBytes<V>::Word*>(p) = r.word;
}

// One thread per output pixel and V-channel vector: scans the window, keeps the first maximum
// (a NaN beats everything and stays), writes the value and the winner's index. Index is 32-bit
// where every offset fits (the pixel's decomposition is then 32-bit division, not 64-bit).
template <typename T, int V, typename Index>
__global__ void max_pool_forward_kernel(const T* x, PoolGeometry g, Index packs, T* y, std::uint8_t* argmax) {
  const Index vectors = static_cast<Index>(g.c / V);
  for (Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int cv = static_cast<int>(p % vectors);
    Index rest = p / vectors;
    const int ox = static_cast<int>(rest % static_cast<Index>(g.ow));
    rest /= static_cast<Index>(g.ow);
    const int oy = static_cast<int>(rest % static_cast<Index>(g.oh));
    const Index n = rest / static_cast<Index>(g.oh);
    float best[V];
    ArgmaxBytes<V> win;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      best[j] = 0.f;
      win.b[j] = 0xff;  // none yet
    }
    for (int ky = 0; ky < g.kh; ++ky) {
      const int iy = oy * g.sh - g.ph + ky;
      if (iy < 0 || iy >= g.h) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const int ix = ox * g.sw - g.pw + kx;
        if (ix < 0 || ix >= g.w) continue;
        float v[V];
        load_vec<V>(x + ((n * static_cast<Index>(g.h) + iy) * static_cast<Index>(g.w) + ix) * static_cast<Index>(g.c) +
                        cv * V,
                    v);
        const auto k = static_cast<std::uint8_t>(ky * g.kw + kx);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const bool best_is_nan = win.b[j] != 0xff && best[j] != best[j];
          if (win.b[j] == 0xff || (!best_is_nan && (v[j] > best[j] || v[j] != v[j]))) {
            best[j] = v[j];
            win.b[j] = k;
          }
        }
      }
    }
    const Index out = p * V;  // (n, oy, ox, c) in channels-last order is p * V
    store_vec<V>(y + out, best);
    store_argmax<V>(argmax + out, win);
  }
}

// One thread per input pixel and V-channel vector: gathers the gradients of the outputs whose
// windows hold this pixel and chose it. W > 0: at most W x W windows hold a pixel (ceil(kernel /
// stride) per dimension; 2 for ResNet's 3 x 3 stride-2 pooling), and the winners of all of them
// are loaded before any gradient, each set of loads in flight at once, instead of one dependent
// load after another. W == 0: any geometry.
template <typename T, int V, typename Index, int W>
__global__ void max_pool_backward_kernel(const std::uint8_t* argmax, const T* gy, PoolGeometry g, Index packs,
                                         float beta, T* gx) {
  const Index vectors = static_cast<Index>(g.c / V);
  for (Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int cv = static_cast<int>(p % vectors);
    Index rest = p / vectors;
    const int ix = static_cast<int>(rest % static_cast<Index>(g.w));
    rest /= static_cast<Index>(g.w);
    const int iy = static_cast<int>(rest % static_cast<Index>(g.h));
    const Index n = rest / static_cast<Index>(g.h);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.f;
    // Outputs oy with oy*sh - ph <= iy <= oy*sh - ph + kh - 1.
    const int ty = iy + g.ph, tx = ix + g.pw;
    const int oy_lo = ty >= g.kh ? (ty - g.kh) / g.sh + 1 : 0, oy_hi = min(ty / g.sh, g.oh - 1);
    const int ox_lo = tx >= g.kw ? (tx - g.kw) / g.sw + 1 : 0, ox_hi = min(tx / g.sw, g.ow - 1);
    // Window (oy, ox)'s output offset and this pixel's index within it.
    const auto output = [&](int oy, int ox) {
      return ((n * static_cast<Index>(g.oh) + oy) * static_cast<Index>(g.ow) + ox) * static_cast<Index>(g.c) + cv * V;
    };
    const auto slot = [&](int oy, int ox) { return static_cast<std::uint8_t>((ty - oy * g.sh) * g.kw + (tx - ox * g.sw)); };
    const auto gather = [&](const ArgmaxBytes<V>& won, std::uint8_t k, Index o) {
      bool any = false;
#pragma unroll
      for (int j = 0; j < V; ++j) any |= won.b[j] == k;
      if (!any) return;  // this window chose another pixel in every channel: gy is not read
      float gv[V];
      load_vec<V>(gy + o, gv);
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (won.b[j] == k) acc[j] += gv[j];
    };
    if constexpr (W > 0) {
      ArgmaxBytes<V> won[W][W];
#pragma unroll
      for (int a = 0; a < W; ++a)
#pragma unroll
        for (int b = 0; b < W; ++b)
          if (oy_lo + a <= oy_hi && ox_lo + b <= ox_hi) won[a][b] = load_argmax<V>(argmax + output(oy_lo + a, ox_lo + b));
#pragma unroll
      for (int a = 0; a < W; ++a)
#pragma unroll
        for (int b = 0; b < W; ++b)
          if (oy_lo + a <= oy_hi && ox_lo + b <= ox_hi)
            gather(won[a][b], slot(oy_lo + a, ox_lo + b), output(oy_lo + a, ox_lo + b));
    } else {
      for (int oy = oy_lo; oy <= oy_hi; ++oy)
        for (int ox = ox_lo; ox <= ox_hi; ++ox)
          gather(load_argmax<V>(argmax + output(oy, ox)), slot(oy, ox), output(oy, ox));
    }
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

PoolGeometry geometry(const Pool2dParams& p, const Shape& in, const Shape& out) {
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  return {i(in[2]), i(in[3]), i(in[1]), i(out[2]), i(out[3]), i(p.kernel_h), i(p.kernel_w),
          i(p.stride_h), i(p.stride_w), i(p.pad_h), i(p.pad_w)};
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
    const PoolGeometry g = geometry(p, x.shape(), y.shape());
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
    const PoolGeometry g = geometry(p, gx.shape(), gy.shape());
    const T* gyp = in_ptr<T>(gy);
    T* gxp = out_ptr<T>(gx);
    const auto* ap = static_cast<const std::uint8_t*>(argmax.raw_data());
    with_pack_width<T>(g.c, {gyp, gxp, ap}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const std::int64_t packs = gx.numel() / V;
      with_index_type(std::max(gx.numel(), gy.numel()), [&](auto index) {
        using Index = decltype(index);
        const unsigned blocks = grid_for(packs, kThreads, d.device());
        // Windows holding one pixel, per dimension: ceil(kernel / stride).
        const bool two = (g.kh + g.sh - 1) / g.sh <= 2 && (g.kw + g.sw - 1) / g.sw <= 2;
        if (two)
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
