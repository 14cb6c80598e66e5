// Group and layer normalisation on the CPU: one row (a sample's group) per iteration, its
// statistics summed in double; the per-channel gradients of the affine parameters in a second
// loop over channels.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

// Runs f(r) for every row r in [0, rows), threaded when the rows hold enough elements.
template <typename F>
void for_each_row_of(std::int64_t rows, std::int64_t row_len, F&& f) {
#pragma omp parallel for if (rows * row_len > kParallelGrain && rows > 1) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) f(r);
}

void normalize_groups_cpu(const NormGroups& g, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) {
  const std::int64_t cg = g.channels / g.groups, len = cg * g.inner;
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  const float* pb = bias.data<float>();
  float* py = y.data<float>();
  float* pm = mean.data<float>();
  float* ps = rstd.data<float>();
  for_each_row_of(g.n * g.groups, len, [&](std::int64_t r) {
    const float* xr = px + r * len;
    double sum = 0.0;
    for (std::int64_t j = 0; j < len; ++j) sum += xr[j];
    const double mu = sum / static_cast<double>(len);
    // Two passes: the sum of squared deviations keeps its precision when the mean is large.
    double sq = 0.0;
    for (std::int64_t j = 0; j < len; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(len) + eps));
    pm[r] = m;
    ps[r] = s;
    const std::int64_t c0 = (r % g.groups) * cg;
    float* yr = py + r * len;
    for (std::int64_t j = 0; j < len; ++j) {
      const std::int64_t c = c0 + j / g.inner;
      yr[j] = (xr[j] - m) * s * pw[c] + pb[c];
    }
  });
}

// gx = rstd * (gy*w - mean(gy*w) - xhat * mean(gy*w*xhat)) per row.
void groups_input_grad(const NormGroups& g, const float* px, const float* pg, const float* pw, const float* pm,
                       const float* ps, float beta, float* po) {
  const std::int64_t cg = g.channels / g.groups, len = cg * g.inner;
  for_each_row_of(g.n * g.groups, len, [&](std::int64_t r) {
    const std::int64_t off = r * len, c0 = (r % g.groups) * cg;
    const float m = pm[r], s = ps[r];
    double a = 0.0, b = 0.0;
    for (std::int64_t j = 0; j < len; ++j) {
      const float gw = pg[off + j] * pw[c0 + j / g.inner];
      a += gw;
      b += gw * (px[off + j] - m) * s;
    }
    const float ma = static_cast<float>(a / static_cast<double>(len));
    const float mb = static_cast<float>(b / static_cast<double>(len));
    for (std::int64_t j = 0; j < len; ++j) {
      const float xhat = (px[off + j] - m) * s;
      const float v = s * (pg[off + j] * pw[c0 + j / g.inner] - ma - xhat * mb);
      po[off + j] = (beta == 0.f ? 0.f : po[off + j]) + v;
    }
  });
}

// gweight[c] = sum gy * xhat, gbias[c] = sum gy over channel c of every sample.
void groups_affine_grad(const NormGroups& g, const float* px, const float* pg, const float* pm, const float* ps,
                        float* gw, float* gb) {
  const std::int64_t cg = g.channels / g.groups, stride = g.channels * g.inner;
  std::vector<double> sw(static_cast<std::size_t>(g.channels), 0.0), sb(sw.size(), 0.0);
  if (g.inner == 1) {
    // Layer norm's layout: channels are the rows' columns, so walk the rows in memory order.
    for (std::int64_t i = 0; i < g.n; ++i)
      for (std::int64_t c = 0; c < g.channels; ++c) {
        const std::int64_t r = i * g.groups + c / cg, k = i * stride + c;
        sw[c] += static_cast<double>(pg[k]) * ((px[k] - pm[r]) * ps[r]);
        sb[c] += pg[k];
      }
  } else {
    for_each_row_of(g.channels, g.n * g.inner, [&](std::int64_t c) {
      for (std::int64_t i = 0; i < g.n; ++i) {
        const std::int64_t r = i * g.groups + c / cg, off = i * stride + c * g.inner;
        for (std::int64_t s = 0; s < g.inner; ++s) {
          sw[c] += static_cast<double>(pg[off + s]) * ((px[off + s] - pm[r]) * ps[r]);
          sb[c] += pg[off + s];
        }
      }
    });
  }
  for (std::int64_t c = 0; c < g.channels; ++c) {
    gw[c] = static_cast<float>(sw[c]);
    gb[c] = static_cast<float>(sb[c]);
  }
}

void normalize_groups_backward_cpu(const NormGroups& g, const Tensor& x, const Tensor& gy, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, float beta, Tensor& gx, Tensor& gweight,
                                   Tensor& gbias) {
  const float* px = x.data<float>();
  const float* pg = gy.data<float>();
  const float* pm = mean.data<float>();
  const float* ps = rstd.data<float>();
  if (gx.numel() > 0) groups_input_grad(g, px, pg, weight.data<float>(), pm, ps, beta, gx.data<float>());
  if (gweight.numel() > 0 || gbias.numel() > 0)
    groups_affine_grad(g, px, pg, pm, ps, gweight.data<float>(), gbias.data<float>());
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(normalize_groups, normalize_groups_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(normalize_groups_backward, normalize_groups_backward_cpu);

}  // namespace dpl::backend::cpu
