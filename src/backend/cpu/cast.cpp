// Conversions between float32, bfloat16 and float16 on the CPU (the cast kernel, and the
// widening of 16-bit tensors that every float kernel of this backend relies on).
#include <cmath>

#include "backend/cpu/cpu.hpp"
#include "core/half.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::cpu {

namespace {

float load(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBFloat16: return dpl::detail::bfloat16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kFloat16: return dpl::detail::float16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

template <typename ToBits>
void narrow(const void* src, DType src_dtype, std::uint16_t* dst, std::int64_t n, ToBits to_bits) {
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_bits(load(src, src_dtype, i));
}

}  // namespace

void convert(const Tensor& src, Tensor& dst) {
  const std::int64_t n = src.numel();
  const void* s = src.raw_data();
  const DType st = src.dtype();
  switch (dst.dtype()) {
    case DType::kBFloat16:
      narrow(s, st, static_cast<std::uint16_t*>(dst.raw_data()), n, dpl::detail::float_to_bfloat16);
      break;
    case DType::kFloat16:
      narrow(s, st, static_cast<std::uint16_t*>(dst.raw_data()), n, dpl::detail::float_to_float16);
      break;
    default: {
      float* d = dst.data<float>();
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) d[i] = load(s, st, i);
    }
  }
}

namespace {

void unscale_grads_cpu(const Tensor& grad, float inv_scale, Tensor& master, Tensor& found_inf) {
  const std::int64_t n = grad.numel();
  const void* g = grad.raw_data();
  const DType gt = grad.dtype();
  float* m = master.data<float>();
  // The product, not the input, is checked: it is what the optimizer would read.
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = load(g, gt, i) * inv_scale;
    m[i] = v;
    bad = bad || !std::isfinite(v);
  }
  if (bad) found_inf.data<float>()[0] = 1.f;
}

void unscale_grads_by_cpu(const Tensor& grad, const Tensor& inv_scale, Tensor& master, Tensor& found_inf) {
  unscale_grads_cpu(grad, inv_scale.data<float>()[0], master, found_inf);
}

void flag_non_finite_cpu(const Tensor& x, Tensor& flag) {
  const std::int64_t n = x.numel();
  const void* p = x.raw_data();
  const DType t = x.dtype();
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) bad = bad || !std::isfinite(load(p, t, i));
  if (bad) flag.data<float>()[0] = 1.f;
}

}  // namespace

DPL_REGISTER_KERNEL(cast, kCpu, convert);
DPL_REGISTER_KERNEL(unscale_grads, kCpu, unscale_grads_cpu);
DPL_REGISTER_KERNEL(unscale_grads_by, kCpu, unscale_grads_by_cpu);
DPL_REGISTER_KERNEL(flag_non_finite, kCpu, flag_non_finite_cpu);

}  // namespace dpl::backend::cpu
