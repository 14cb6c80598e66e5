#pragma once
// CPU-vs-CUDA agreement of an autograd op in float32, bfloat16 and float16. The same random
// leaves, rounded to the dtype, run through the op on both devices; the backward pass starts
// from sum(y * w), so every element of every gradient matters. Both backends compute in float32
// and round once per kernel, so 16-bit results differ at most by the rounding of values that
// landed on either side of a rounding boundary: rtol one unit in the last place (2^-7 bfloat16,
// 2^-10 float16) with a matching atol, 1e-5 for float32.

#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {

/// The fixture of the dtype agreement tests: check_dtypes(name, shapes, op) runs op on both
/// devices in each float dtype.
class DtypeAgreementTest : public CudaTest {
 protected:
  using Op = std::function<Variable(const std::vector<Variable>&)>;

  static float rtol_of(DType t) { return t == kFloat32 ? 1e-5f : t == kBFloat16 ? 1.f / 128 : 1.f / 1024; }

  // Leaves uniform in [lo, hi), rounded to each dtype; op's result and every gradient compared.
  void check_dtypes(const std::string& name, const std::vector<Shape>& shapes, const Op& op, float lo = -1.f,
                    float hi = 1.f) {
    for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
      SCOPED_TRACE(name + " in " + dtype_name(dt));
      const float rtol = rtol_of(dt), atol = dt == kFloat32 ? 1e-5f : 4.f * rtol_of(dt);
      std::vector<Variable> xc, xg;
      for (const Shape& s : shapes) {
        const Tensor t = rand(s, lo, hi).to(dt);
        xc.emplace_back(t.clone(), true);
        xg.emplace_back(t.to(gpu()), true);
      }
      const Variable yc = op(xc), yg = op(xg);
      ASSERT_EQ(yg.device(), gpu());
      ASSERT_EQ(yg.data().dtype(), dt);
      expect_close(yg.data(), yc.data(), rtol, atol, name + " forward");
      const Tensor w = rand(yc.shape()).to(dt);
      sum(mul(yc, Variable(w))).backward();
      sum(mul(yg, Variable(w.to(gpu())))).backward();
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        ASSERT_TRUE(xg[i].grad().defined()) << name << " input " << i << " got no gradient on the GPU";
        expect_close(xg[i].grad(), xc[i].grad(), rtol, atol, name + " grad of input " + std::to_string(i));
      }
    }
  }

  /// t on the device of v (labels and masks go with the op's operands).
  static Tensor beside(const Tensor& t, const Variable& v) { return v.device().is_cpu() ? t : t.to(v.device()); }
};

}  // namespace dpl::test
