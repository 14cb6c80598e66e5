// Reductions along one dimension on the CPU: x viewed as (outer, n, inner), one output per
// (outer, inner) pair. Each thread takes whole outer slices and walks n with the inner extent
// innermost, so the loads stay sequential whichever dimension is reduced.
#include <vector>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

// True when v replaces the current best b: NaN beats every number (PyTorch's max and min
// propagate NaN), and only a strictly better value replaces, so the first index wins ties.
inline bool beats(ReduceKind kind, float v, float b) {
  if (b != b) return false;
  if (v != v) return true;
  return kind == ReduceKind::kMax ? v > b : v < b;
}

void reduce_dim_cpu(ReduceKind kind, float alpha, const Tensor& x, Tensor& out, Tensor* indices) {
  const std::int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  const float* px = x.data<float>();
  float* po = out.data<float>();
  std::int64_t* pi = kind == ReduceKind::kSum ? nullptr : indices->data<std::int64_t>();
#pragma omp parallel for if (x.numel() > kParallelGrain) schedule(static)
  for (std::int64_t o = 0; o < outer; ++o) {
    const float* xo = px + o * n * inner;
    float* oo = po + o * inner;
    if (kind == ReduceKind::kSum) {
      std::vector<float> acc(static_cast<std::size_t>(inner), 0.f);
      for (std::int64_t r = 0; r < n; ++r) {
        const float* row = xo + r * inner;
        for (std::int64_t i = 0; i < inner; ++i) acc[static_cast<std::size_t>(i)] += row[i];
      }
      for (std::int64_t i = 0; i < inner; ++i) oo[i] = alpha * acc[static_cast<std::size_t>(i)];
      continue;
    }
    std::int64_t* io = pi + o * inner;
    for (std::int64_t i = 0; i < inner; ++i) {
      oo[i] = xo[i];
      io[i] = 0;
    }
    for (std::int64_t r = 1; r < n; ++r) {
      const float* row = xo + r * inner;
      for (std::int64_t i = 0; i < inner; ++i) {
        if (beats(kind, row[i], oo[i])) {
          oo[i] = row[i];
          io[i] = r;
        }
      }
    }
  }
}

void reduce_dim_backward_cpu(ReduceKind kind, float alpha, const Tensor& gy, const Tensor* indices, float beta,
                             Tensor& gx) {
  const std::int64_t n = gx.size(1), inner = gx.size(2);
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  const std::int64_t* pi = kind == ReduceKind::kSum ? nullptr : indices->data<std::int64_t>();
  for_each_index(gx.numel(), [&](std::int64_t e) {
    const std::int64_t i = e % inner, r = (e / inner) % n, o = e / (inner * n);
    const std::int64_t k = o * inner + i;
    const float v = pi == nullptr ? alpha * pg[k] : (pi[k] == r ? pg[k] : 0.f);
    po[e] = beta == 0.f ? v : po[e] + v;
  });
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(reduce_dim, reduce_dim_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(reduce_dim_backward, reduce_dim_backward_cpu);

}  // namespace dpl::backend::cpu
