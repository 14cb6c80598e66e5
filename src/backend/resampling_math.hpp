#pragma once
// The index and weight rule of upsample2d along one axis, written once for the CPU and CUDA
// kernels (compiled for both where nvcc compiles it), so that both backends pick the same source
// pixels with the same float32 arithmetic as PyTorch. Internal header of the backend.

#include <math.h>  // floorf, which host and device code share

#include <cstdint>

#include "backend/kernels.hpp"

namespace dpl::backend {

/// The two source pixels i0 <= i1 that output pixel `dst` reads along one axis and their weights
/// (nearest: i1 == i0 with weights 1 and 0).
struct UpsampleTaps {
  std::int64_t i0, i1;
  float w0, w1;
};

/// PyTorch's source pixels of output index dst along an axis of `in` input and `out` output
/// pixels with source step `scale` (Upsample2dParams). Nearest takes PyTorch's shortcuts for
/// out == in and out == 2 in before floor(dst * scale), which can differ from the shortcut when a
/// scale factor was given. i0 never decreases as dst grows, which upsample_first_reader uses.
DPL_HOST_DEVICE inline UpsampleTaps upsample_taps(UpsampleMode mode, bool align_corners, float scale, std::int64_t dst,
                                                  std::int64_t in, std::int64_t out) {
  if (mode == UpsampleMode::kNearest) {
    std::int64_t s = dst;
    if (out == 2 * in) {
      s = dst >> 1;
    } else if (out != in) {
      s = static_cast<std::int64_t>(floorf(static_cast<float>(dst) * scale));
      if (s > in - 1) s = in - 1;
    }
    return {s, s, 1.f, 0.f};
  }
  float src = align_corners ? scale * static_cast<float>(dst) : scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
  if (src < 0.f) src = 0.f;
  const auto i0 = static_cast<std::int64_t>(src);
  const float l1 = src - static_cast<float>(i0);
  return {i0, i0 < in - 1 ? i0 + 1 : i0, 1.f - l1, l1};
}

/// The first output index in [0, out] whose i0 is at least k (out when none is): the outputs that
/// read input index r lie in [upsample_first_reader(r - 1), upsample_first_reader(r + 1)).
DPL_HOST_DEVICE inline std::int64_t upsample_first_reader(UpsampleMode mode, bool align_corners, float scale,
                                                          std::int64_t k, std::int64_t in, std::int64_t out) {
  std::int64_t lo = 0, hi = out;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (upsample_taps(mode, align_corners, scale, mid, in, out).i0 >= k) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/// The weight with which output index dst reads input index r (0 when it does not).
DPL_HOST_DEVICE inline float upsample_weight(const UpsampleTaps& t, std::int64_t r) {
  return (t.i0 == r ? t.w0 : 0.f) + (t.i1 == r ? t.w1 : 0.f);
}

}  // namespace dpl::backend
