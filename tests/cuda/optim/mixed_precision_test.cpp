// CPU-vs-CUDA agreement of mixed precision: the fused unscale kernel (values and overflow flag,
// every gradient dtype) and a few steps of 16-bit training through float32 masters, including a
// float16 step skipped for an Inf, on the GPU's streams.
#include <limits>
#include <memory>

#include "backend/kernels.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class MixedPrecisionTest : public CudaTest {};

// The product of one float multiply per element is the same on both devices: bit for bit.
TEST_F(MixedPrecisionTest, UnscaleKernelMatchesCpu) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor g = rand({1000}, -100.f, 100.f).to(dt);
    Tensor mc = Tensor::empty({1000}, kFloat32), fc = Tensor::zeros({1}, kFloat32);
    Tensor mg = poisoned({1000}), fg = Tensor::zeros({1}, TensorOptions(kFloat32, gpu()));
    backend::unscale_grads(g, 1.f / 512.f, mc, fc);
    backend::unscale_grads(on_gpu(g), 1.f / 512.f, mg, fg);
    expect_equal<float>(mg.to(Device::cpu()), mc, "unscaled gradients");
    EXPECT_EQ(fg.item(), 0.f);
    EXPECT_EQ(fc.item(), 0.f);

    // One Inf deep inside the buffer raises the flag on both; a later clean call keeps it raised.
    Tensor bad = g.clone();
    Tensor one = bad.narrow(0, 777, 1);
    one.fill_(std::numeric_limits<double>::infinity());
    backend::unscale_grads(bad, 1.f, mc, fc);
    backend::unscale_grads(on_gpu(bad), 1.f, mg, fg);
    backend::unscale_grads(on_gpu(g), 1.f, mg, fg);
    EXPECT_EQ(fc.item(), 1.f);
    EXPECT_EQ(fg.item(), 1.f);
  }
}

// A few SGD steps of a 16-bit MLP with float32 masters, on each device from the same weights
// and batches: the masters agree to the rounding of the 16-bit forward and backward, the model
// equals its rounded masters on the GPU too, and both devices skip the poisoned float16 step.
// SGD rather than Adam: Adam's normalised step turns a rounding difference in a near-zero
// gradient into a full step of difference, which would say nothing about these kernels.
TEST_F(MixedPrecisionTest, TrainingMatchesCpu) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator g1(seed_), g2(seed_);
    nn::MLP mc(32, 16, 4, g1), mg(32, 16, 4, g2);
    mg.to(gpu());
    auto oc = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), dt, {256.0, 2.0, 0.5, 2});
    auto og = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), dt, {256.0, 2.0, 0.5, 2});
    oc->setup(mc);
    og->setup(mg);
    for (int step = 0; step < 5; ++step) {
      const Tensor x = rand({20, 16}).to(dt), y = labels(20, 4);
      const Tensor xg = on_gpu(x), yg = on_gpu(y);
      oc->zero_grad();
      og->zero_grad();
      oc->backward(softmax_cross_entropy(mc(Variable(x)), y));
      og->backward(softmax_cross_entropy(mg(Variable(xg)), yg));
      if (step == 3 && dt == kFloat16) {
        Tensor a = mc.arena().grads().narrow(0, 1, 1), b = mg.arena().grads().narrow(0, 1, 1);
        a.fill_(std::numeric_limits<double>::infinity());
        b.fill_(std::numeric_limits<double>::infinity());
      }
      oc->update();
      og->update();
      EXPECT_EQ(og->last_step_skipped(), oc->last_step_skipped()) << "step " << step;
      EXPECT_EQ(og->loss_scale(), oc->loss_scale()) << "step " << step;
    }
    EXPECT_EQ(og->t(), oc->t());
    EXPECT_EQ(mg.arena().params().device(), gpu());
    EXPECT_EQ(og->master_params().device(), gpu());
    expect_close(og->master_params(), oc->master_params(), 2e-2f, 2e-3f, "masters");
    expect_equal<float>(mg.arena().params().to(kFloat32).to(Device::cpu()),
                        og->master_params().to(dt).to(kFloat32).to(Device::cpu()),
                        "GPU parameters against their rounded masters");
  }
}

}  // namespace
}  // namespace dpl::test
