#pragma once
// CPU-vs-CUDA agreement of the image ops that take one input (batch normalisation, pooling):
// oneDNN against cuDNN and dpl's channels-last kernels, in NCHW and channels-last memory, float32
// and 16-bit. Tolerances: 16-bit outputs are float32 results rounded once on each device, so two
// results one rounding apart differ by at most two units in the last place: rtol 2^-7 for
// bfloat16, 2^-10 for float16, on top of the float32 tolerance (gradients accumulated onto a
// prior one: see expect_close_accumulated; sums of several rounded terms: see operand_atol).

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::test {

// t's values in channels-last memory on t's device.
inline Tensor channels_last(const Tensor& t) {
  const std::int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  Tensor out(Storage::allocate(t.nbytes(), t.device()), 0, t.shape(), {h * w * c, 1, w * c, c}, t.dtype());
  out.copy_(t);
  return out;
}

// Max pooling's gradient goes to the largest element of each window; when two elements of a
// window tie (likely once random values are rounded to 16 bits), the devices may pick different
// ones. This input has no ties at all: distinct magnitudes m/128 * 2^-e (m in [128, 256), e in
// [0, 6)), exact in bfloat16 and float16, in a random order with random signs.
inline Tensor distinct_values(const Shape& shape, const Tensor& keys) {
  std::vector<float> magnitudes;
  for (int e = 0; e < 6; ++e)
    for (int m = 128; m < 256; ++m) magnitudes.push_back(static_cast<float>(m) / 128.f / static_cast<float>(1 << e));
  const std::vector<float> k = keys.to_vector<float>();
  DPL_CHECK(k.size() <= magnitudes.size(), "distinct_values: at most ", magnitudes.size(), " elements");
  std::vector<std::size_t> order(k.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return k[a] < k[b]; });
  std::vector<float> v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) v[order[i]] = (k[i] < 0.f ? -1.f : 1.f) * magnitudes[i];
  return Tensor::from_vector(v, shape);
}

inline float rtol_of(DType t, float base) {
  return t == kBFloat16 ? base + 1.f / 128 : t == kFloat16 ? base + 1.f / 1024 : base;
}

// An absolute tolerance at the operands' scale (values up to about 2) for 16-bit results that
// sum or compose several rounded terms: max pooling's gradient adds the output gradients of
// overlapping windows (one device may round between the adds), and the composed BN+add+ReLU
// rounds the normalised value before adding the residual, where the fused kernel rounds once.
// Cancellation can leave a small result carrying an error of the operands' size.
inline float operand_atol(DType t, float base) { return t == kFloat32 ? base : 2.f * rtol_of(t, 0.f); }

/// The fixture of the image op agreement tests: check(name, shape, dtype, nhwc, op, rtol, atol).
class NormPoolTest : public CudaTest {
 protected:
  using Op = std::function<Variable(const Variable&)>;

  // Runs op on the same input on both devices (rounded to dtype first, in the given format),
  // compares the outputs and the input gradients of sum(y * w), fresh and accumulated.
  // With float32_reference, the CPU computes in float32 from the same rounded inputs: the
  // reference for a fused 16-bit kernel, which rounds once where the CPU's composition of 16-bit
  // ops rounds at every op (and near ReLU's kink can even route a gradient differently).
  void check(const std::string& name, const Shape& shape, DType dtype, bool nhwc, const Op& op, float rtol,
             float atol, bool without_ties = false, bool float32_reference = false) {
    SCOPED_TRACE(name + " " + dtype_name(dtype) + (nhwc ? " channels-last" : " NCHW"));
    auto cpu_side = [&](const Tensor& t) { return float32_reference ? t.to(kFloat32) : t; };
    const Tensor base = (without_ties ? distinct_values(shape, rand(shape)) : rand(shape, -2.f, 2.f)).to(dtype);
    const Tensor xc = cpu_side(nhwc ? channels_last(base) : base);
    const Tensor xg = nhwc ? channels_last(on_gpu(base)) : on_gpu(base);
    for (bool accumulate : {false, true}) {
      Variable vc(xc, true), vg(xg, true);
      Tensor prior;  // the gradient accumulated onto, kept apart from the buffers backward adds into
      if (accumulate) {
        prior = rand(shape).to(dtype);
        vc.set_grad(cpu_side(prior).clone());
        vg.set_grad(on_gpu(prior));
      }
      const Variable yc = op(vc), yg = op(vg);
      expect_close(yg.data().to(Device::cpu()).to(kFloat32), yc.data().to(kFloat32), rtol, atol, "forward");
      const Tensor w = rand(yc.shape()).to(dtype);
      sum(mul(yc, Variable(cpu_side(w)))).backward();
      sum(mul(yg, Variable(on_gpu(w)))).backward();
      const Tensor got = vg.grad().to(Device::cpu());
      if (accumulate) {
        expect_close_accumulated(got, vc.grad().to(got.dtype()), prior, rtol * 10, atol * 10, "gradient (accumulated)");
      } else {
        expect_close(got.to(kFloat32), vc.grad().to(kFloat32), rtol * 10, atol * 10, "gradient");
      }
    }
  }
};

}  // namespace dpl::test
