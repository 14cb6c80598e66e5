// The non-finite check on the GPU: the flag kernel agrees with the CPU's for every dtype, and an
// optimizer on a GPU model stops (naming the parameter) or skips as on the CPU.
#include <gmock/gmock.h>

#include <limits>
#include <memory>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class NonFiniteTest : public CudaTest {};

TEST_F(NonFiniteTest, FlagKernelMatchesCpu) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor clean = rand({100000}, -100.f, 100.f).to(dt);
    Tensor fc = Tensor::zeros({1}, kFloat32), fg = Tensor::zeros({1}, TensorOptions(kFloat32, gpu()));
    backend::flag_non_finite(clean, fc);
    backend::flag_non_finite(on_gpu(clean), fg);
    EXPECT_EQ(fc.item(), 0.f);
    EXPECT_EQ(fg.item(), 0.f);
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
      Tensor t = clean.clone();
      t.narrow(0, 99989, 1).fill_(bad);
      fc.fill_(0.0);
      fg.fill_(0.0);
      backend::flag_non_finite(t, fc);
      backend::flag_non_finite(on_gpu(t), fg);
      // A clean buffer afterwards leaves the flag raised on both devices.
      backend::flag_non_finite(on_gpu(clean), fg);
      EXPECT_EQ(fc.item(), 1.f) << bad;
      EXPECT_EQ(fg.item(), 1.f) << bad;
    }
  }
}

TEST_F(NonFiniteTest, OptimizerOnTheGpuStopsOrSkips) {
  Generator init(seed_);
  nn::MLP model(16, 8, 3, init);
  model.to(gpu());
  Tensor x = rand({6, 8});
  x.set<float>({2, 1}, std::numeric_limits<float>::quiet_NaN());
  const Tensor xg = on_gpu(x), yg = on_gpu(labels(6, 3));
  optim::SGD opt(0.1f);
  opt.setup(model);
  const auto loss = [&] { return softmax_cross_entropy(model(Variable(xg)), yg); };
  const std::vector<float> before = model.arena().params().to(Device::cpu()).to_vector<float>();
  try {
    opt.update(loss);
    ADD_FAILURE() << "a NaN in the data did not stop the step";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("iteration 1: non-finite gradient (Inf or NaN) of parameter "
                                               "'l1.weight'; the loss was NaN"));
  }
  opt.set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  opt.update(loss);
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(model.arena().params().to(Device::cpu()).to_vector<float>(), before);
}

}  // namespace
}  // namespace dpl::test
