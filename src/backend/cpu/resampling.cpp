// Adaptive average pooling and upsampling on the CPU: one (sample, channel) plane per iteration.
#include <vector>

#include "backend/cpu/cpu.hpp"
#include "backend/resampling_math.hpp"

namespace dpl::backend::cpu {

namespace {

// PyTorch's adaptive window of output index i when `in` elements pool into `out`:
// [floor(i in / out), ceil((i + 1) in / out)).
std::int64_t window_start(std::int64_t i, std::int64_t in, std::int64_t out) { return i * in / out; }
std::int64_t window_end(std::int64_t i, std::int64_t in, std::int64_t out) { return ((i + 1) * in + out - 1) / out; }

// Calls f(plane) for every (sample, channel) plane, threaded when there is enough work.
template <typename F>
void for_each_plane(std::int64_t planes, std::int64_t work_per_plane, F&& f) {
#pragma omp parallel for if (planes * work_per_plane > kParallelGrain && planes > 1) schedule(static)
  for (std::int64_t p = 0; p < planes; ++p) f(p);
}

// Calls f(k, r0, r1, c0, c1) for output pixel k = i * wo + j of an (h, w) -> (ho, wo) plane and
// its window, rows [r0, r1) and columns [c0, c1).
template <typename F>
void for_each_window(std::int64_t h, std::int64_t w, std::int64_t ho, std::int64_t wo, F&& f) {
  for (std::int64_t i = 0; i < ho; ++i) {
    const std::int64_t r0 = window_start(i, h, ho), r1 = window_end(i, h, ho);
    for (std::int64_t j = 0; j < wo; ++j) f(i * wo + j, r0, r1, window_start(j, w, wo), window_end(j, w, wo));
  }
}

void adaptive_avg_pool2d_cpu(const Tensor& x, Tensor& y) {
  const std::int64_t h = x.size(2), w = x.size(3), ho = y.size(2), wo = y.size(3);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for_each_plane(x.size(0) * x.size(1), h * w, [&](std::int64_t p) {
    const float* xp = px + p * h * w;
    float* yp = py + p * ho * wo;
    for_each_window(h, w, ho, wo, [&](std::int64_t k, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                                      std::int64_t c1) {
      float s = 0.f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) s += xp[r * w + c];
      yp[k] = s / static_cast<float>((r1 - r0) * (c1 - c0));
    });
  });
}

void adaptive_avg_pool2d_backward_cpu(const Tensor& gy, float beta, Tensor& gx) {
  const std::int64_t h = gx.size(2), w = gx.size(3), ho = gy.size(2), wo = gy.size(3);
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  for_each_plane(gx.size(0) * gx.size(1), h * w, [&](std::int64_t p) {
    const float* gp = pg + p * ho * wo;
    float* op = po + p * h * w;
    if (beta == 0.f)
      for (std::int64_t k = 0; k < h * w; ++k) op[k] = 0.f;
    for_each_window(h, w, ho, wo, [&](std::int64_t k, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                                      std::int64_t c1) {
      const float g = gp[k] / static_cast<float>((r1 - r0) * (c1 - c0));
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) op[r * w + c] += g;
    });
  });
}

// The taps of every output index along one axis; the same for every plane.
std::vector<UpsampleTaps> axis_taps(const Upsample2dParams& p, float scale, std::int64_t in, std::int64_t out) {
  std::vector<UpsampleTaps> taps(static_cast<std::size_t>(out));
  for (std::int64_t d = 0; d < out; ++d) taps[d] = upsample_taps(p.mode, p.align_corners, scale, d, in, out);
  return taps;
}

// For every input index r along one axis, the outputs that may read it: [first[r], first[r + 1])
// of the returned pairs (backward's gather, in the order the CUDA kernel sums).
std::vector<std::pair<std::int64_t, std::int64_t>> axis_readers(const Upsample2dParams& p, float scale,
                                                                std::int64_t in, std::int64_t out) {
  std::vector<std::pair<std::int64_t, std::int64_t>> readers(static_cast<std::size_t>(in));
  for (std::int64_t r = 0; r < in; ++r)
    readers[r] = {upsample_first_reader(p.mode, p.align_corners, scale, r - 1, in, out),
                  upsample_first_reader(p.mode, p.align_corners, scale, r + 1, in, out)};
  return readers;
}

void upsample2d_cpu(const Upsample2dParams& p, const Tensor& x, Tensor& y) {
  const std::int64_t h = x.size(2), w = x.size(3), ho = y.size(2), wo = y.size(3);
  const std::vector<UpsampleTaps> rows = axis_taps(p, p.scale_h, h, ho), cols = axis_taps(p, p.scale_w, w, wo);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const bool nearest = p.mode == UpsampleMode::kNearest;
  for_each_plane(x.size(0) * x.size(1), ho * wo, [&](std::int64_t plane) {
    const float* xp = px + plane * h * w;
    float* yp = py + plane * ho * wo;
    for (std::int64_t i = 0; i < ho; ++i) {
      const UpsampleTaps& r = rows[i];
      const float* x0 = xp + r.i0 * w;
      const float* x1 = xp + r.i1 * w;
      for (std::int64_t j = 0; j < wo; ++j) {
        const UpsampleTaps& c = cols[j];
        // Nearest copies, so that a NaN or Inf beside the source pixel does not leak in as 0 * Inf.
        yp[i * wo + j] = nearest ? x0[c.i0]
                                 : r.w0 * (c.w0 * x0[c.i0] + c.w1 * x0[c.i1]) + r.w1 * (c.w0 * x1[c.i0] + c.w1 * x1[c.i1]);
      }
    }
  });
}

void upsample2d_backward_cpu(const Upsample2dParams& p, const Tensor& gy, float beta, Tensor& gx) {
  const std::int64_t h = gx.size(2), w = gx.size(3), ho = gy.size(2), wo = gy.size(3);
  const std::vector<UpsampleTaps> rows = axis_taps(p, p.scale_h, h, ho), cols = axis_taps(p, p.scale_w, w, wo);
  const auto row_readers = axis_readers(p, p.scale_h, h, ho), col_readers = axis_readers(p, p.scale_w, w, wo);
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  for_each_plane(gx.size(0) * gx.size(1), ho * wo, [&](std::int64_t plane) {
    const float* gp = pg + plane * ho * wo;
    float* op = po + plane * h * w;
    for (std::int64_t r = 0; r < h; ++r)
      for (std::int64_t c = 0; c < w; ++c) {
        float s = 0.f;
        for (std::int64_t i = row_readers[r].first; i < row_readers[r].second; ++i) {
          const float wr = upsample_weight(rows[i], r);
          if (wr == 0.f) continue;
          float t = 0.f;
          for (std::int64_t j = col_readers[c].first; j < col_readers[c].second; ++j)
            t += upsample_weight(cols[j], c) * gp[i * wo + j];
          s += wr * t;
        }
        op[r * w + c] = beta == 0.f ? s : op[r * w + c] + s;
      }
  });
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(adaptive_avg_pool2d, adaptive_avg_pool2d_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(adaptive_avg_pool2d_backward, adaptive_avg_pool2d_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(upsample2d, upsample2d_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(upsample2d_backward, upsample2d_backward_cpu);

}  // namespace dpl::backend::cpu
