#pragma once
// The windows of channels-last max pooling, as device code for the kernels that pool
// (backend/cuda/max_pool_nhwc.cu, and the batch norm + ReLU + max-pool stem of
// backend/cuda/batch_norm_nhwc.cu): scanning one output's window for its maximum and winner, and
// gathering the gradients of the outputs whose windows chose one input. One definition, so that
// the fused stem picks the same winners and routes the same gradients as the plain pooling.

#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend::cuda_detail {

struct PoolGeometry {
  int h, w, c, oh, ow;  // input and output sizes, channels
  int kh, kw, sh, sw, ph, pw;
};

inline PoolGeometry pool_geometry(const Pool2dParams& p, const Shape& in, const Shape& out) {
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  return {i(in[2]), i(in[3]), i(in[1]), i(out[2]), i(out[3]), i(p.kernel_h), i(p.kernel_w),
          i(p.stride_h), i(p.stride_w), i(p.pad_h), i(p.pad_w)};
}

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
// The index of no winner: a window wholly in the padding (the callers' checks rule that out).
constexpr std::uint8_t kNoWinner = 0xff;

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

// The pixel of pack index p (one V-channel vector of one pixel, channels-last) in images of h x w
// pixels: image n, row y, column x, and the first channel cv * V.
template <typename Index>
struct Pixel {
  Index n;
  int y, x, cv;
};
template <int V, typename Index>
__device__ __forceinline__ Pixel<Index> pixel_of(Index p, int c, int h, int w) {
  const Index vectors = static_cast<Index>(c / V);
  Pixel<Index> o;
  o.cv = static_cast<int>(p % vectors);
  Index rest = p / vectors;
  o.x = static_cast<int>(rest % static_cast<Index>(w));
  rest /= static_cast<Index>(w);
  o.y = static_cast<int>(rest % static_cast<Index>(h));
  o.n = rest / static_cast<Index>(h);
  return o;
}

// The offset of input pixel (n, iy, ix)'s channel vector cv.
template <int V, typename Index>
__device__ __forceinline__ Index input_offset(const PoolGeometry& g, Index n, int iy, int ix, int cv) {
  return ((n * static_cast<Index>(g.h) + iy) * static_cast<Index>(g.w) + ix) * static_cast<Index>(g.c) + cv * V;
}

// The maximum of output pixel o's window over value(v) of each input vector v of x, and its
// winner: the first maximum in row-major order, a NaN beating everything and staying. value maps
// a loaded vector in place (the identity for plain pooling; the stem's batch norm and ReLU).
template <typename T, int V, typename Index, typename Value>
__device__ __forceinline__ void window_max(const T* x, const PoolGeometry& g, const Pixel<Index>& o,
                                           Value&& value, float (&best)[V], ArgmaxBytes<V>& win) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    best[j] = 0.f;
    win.b[j] = kNoWinner;
  }
  for (int ky = 0; ky < g.kh; ++ky) {
    const int iy = o.y * g.sh - g.ph + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.kw; ++kx) {
      const int ix = o.x * g.sw - g.pw + kx;
      if (ix < 0 || ix >= g.w) continue;
      float v[V];
      load_vec<V>(x + input_offset<V>(g, o.n, iy, ix, o.cv), v);
      value(v);
      const auto k = static_cast<std::uint8_t>(ky * g.kw + kx);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const bool best_is_nan = win.b[j] != kNoWinner && best[j] != best[j];
        if (win.b[j] == kNoWinner || (!best_is_nan && (v[j] > best[j] || v[j] != v[j]))) {
          best[j] = v[j];
          win.b[j] = k;
        }
      }
    }
  }
}

// acc[j] = the sum of gy over the outputs whose windows hold input pixel (n, iy, ix) and chose it
// in channel cv * V + j. W > 0: at most W x W windows hold a pixel (ceil(kernel / stride) per
// dimension; 2 for ResNet's 3 x 3 stride-2 pooling), and the winners of all of them are loaded
// before any gradient, each set of loads in flight at once, instead of one dependent load after
// another. W == 0: any geometry. gy is read only where a window chose the pixel in some channel.
template <typename T, int V, typename Index, int W>
__device__ __forceinline__ void gather_window_grads(const std::uint8_t* argmax, const T* gy, const PoolGeometry& g,
                                                    Index n, int iy, int ix, int cv, float (&acc)[V]) {
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
}

// Whether every pixel lies in at most 2 x 2 windows (gather_window_grads's W = 2).
inline bool at_most_two_windows_a_pixel(const PoolGeometry& g) {
  return (g.kh + g.sh - 1) / g.sh <= 2 && (g.kw + g.sw - 1) / g.sw <= 2;
}

}  // namespace dpl::backend::cuda_detail
