// Adaptive average pooling on the CPU: one (sample, channel) plane per iteration.
#include "backend/cpu/cpu.hpp"

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

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(adaptive_avg_pool2d, adaptive_avg_pool2d_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(adaptive_avg_pool2d_backward, adaptive_avg_pool2d_backward_cpu);

}  // namespace dpl::backend::cpu
