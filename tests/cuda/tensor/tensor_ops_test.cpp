// Tensor arithmetic on the GPU agrees with the CPU's, in every float dtype and both formats.
#include <gtest/gtest.h>

#include "cuda_test_util.hpp"
#include "dpl/tensor/tensor_ops.hpp"

namespace dpl::test {
namespace {

class TensorOpsCuda : public CudaTest {};

// got (on the GPU) and want (on the CPU) hold the same values, bit for bit.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  expect_equal<float>(got.to(Device::cpu()).to(kFloat32), want.to(kFloat32), what);
}

TEST_F(TensorOpsCuda, EveryOperatorAgreesWithTheCpu) {
  // (3, 5, 7) takes the kernels' scalar path, (4, 4, 8) the vectorised one.
  for (const Shape& s : {Shape{3, 5, 7}, Shape{4, 4, 8}}) {
    for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
      const Tensor a = rand(s).to(dt), b = rand(s, 0.5f, 2.f).to(dt);
      const Tensor ga = on_gpu(a), gb = on_gpu(b);
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s);
      expect_same(ga + gb, a + b, "a + b " + what);
      expect_same(ga - gb, a - b, "a - b " + what);
      expect_same(ga * gb, a * b, "a * b " + what);
      expect_same(ga / gb, a / b, "a / b " + what);
      expect_same(ga * 0.3f + 0.1f, a * 0.3f + 0.1f, "a * s + s " + what);
      expect_same(1.f - ga / 3.f, 1.f - a / 3.f, "s - a / s " + what);
      Tensor g = ga.clone(), c = a.clone();
      g += gb;
      g *= 2.f;
      g /= gb;
      c += b;
      c *= 2.f;
      c /= b;
      expect_same(g, c, "in place " + what);
    }
  }
}

TEST_F(TensorOpsCuda, ChannelsLastStaysChannelsLast) {
  const Tensor a = rand({2, 3, 4, 5}).to_channels_last(), b = rand({2, 3, 4, 5});
  const Tensor got = on_gpu(a).to_channels_last() - on_gpu(b);
  EXPECT_TRUE(got.is_channels_last());
  expect_same(got, a - b, "channels-last a - contiguous b");
}

}  // namespace
}  // namespace dpl::test
