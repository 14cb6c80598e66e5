// The synchronised BatchNorm path on the GPU, in one process: a stand-in for the sum over the
// processes that doubles every buffer is what two ranks holding the same batch would give, so the
// layer must normalise as BatchNorm2d on that batch twice over (outputs, input gradients, running
// statistics), for every dtype and both memory formats.
#include <memory>
#include <string>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class TwinProcess final : public nn::CrossProcessSum {
 public:
  void sum(Tensor& buffer) override { buffer.copy_(buffer * 2.f); }
  int processes() const override { return 2; }
};

class SyncBatchNormCuda : public CudaTest {};

TEST_F(SyncBatchNormCuda, TwinProcessesNormaliseAsTheBatchTwiceOver) {
  for (const DType dtype : {kFloat32, kBFloat16, kFloat16})
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (channels_last ? " channels-last" : ""));
      const float tol = dtype == kFloat32 ? 1e-4f : 3e-2f;
      const Tensor x = rand({4, 8, 5, 5}, 1.f, 3.f), w = rand({4, 8, 5, 5});
      const auto prepare = [&](const Tensor& t) {
        Tensor v = on_gpu(t).to(dtype);
        return Variable(channels_last ? v.to_channels_last() : v, true);
      };
      nn::BatchNorm2d reference(8), layer(8);
      reference.to(gpu());
      layer.to(gpu());
      layer.synchronize_statistics(std::make_shared<TwinProcess>());
      ASSERT_TRUE(layer.synchronizes_statistics());

      Variable xr = prepare(cat({Variable(x), Variable(x)}, 0).data());
      Variable yr = reference(xr);
      sum(mul(cast(yr, kFloat32), Variable(on_gpu(cat({Variable(w), Variable(w)}, 0).data())))).backward();
      Variable xs = prepare(x);
      Variable ys = layer(xs);
      sum(mul(cast(ys, kFloat32), Variable(on_gpu(w)))).backward();

      expect_close(ys.data().to(kFloat32), yr.data().narrow(0, 0, 4).to(kFloat32), tol, tol, "output");
      expect_close(xs.grad().to(kFloat32), xr.grad().narrow(0, 0, 4).to(kFloat32), tol, tol, "input gradient");
      // Each twin's weight gradient is half the reference's (its loss is half of theirs together).
      expect_close((layer.weight().grad() * 2.f).to(kFloat32), reference.weight().grad().to(kFloat32), tol, tol,
                   "weight gradient");
      expect_close(layer.running_mean(), reference.running_mean(), tol, tol, "running_mean");
      expect_close(layer.running_var(), reference.running_var(), tol, tol, "running_var");
    }
}

}  // namespace
}  // namespace dpl::test
