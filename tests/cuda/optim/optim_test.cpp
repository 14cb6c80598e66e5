// CPU-vs-CUDA agreement of the optimizers over several training steps of a small MLP: the
// parameter arena and every state arena must match after each run. Tolerance rtol 1e-4 /
// atol 1e-5: five steps compound the per-step rounding differences of the products.
#include <memory>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class OptimTest : public CudaTest {
 protected:
  template <typename Opt>
  void check(const std::string& name, float weight_decay, const std::function<std::unique_ptr<Opt>()>& make) {
    SCOPED_TRACE(name + " weight_decay=" + std::to_string(weight_decay));
    Generator g1(seed_), g2(seed_);
    nn::MLP mc(48, 24, 6, g1), mg(48, 24, 6, g2);
    mg.to(gpu());
    auto oc = make(), og = make();
    oc->set_weight_decay(weight_decay);
    og->set_weight_decay(weight_decay);
    oc->setup(mc);
    og->setup(mg);
    for (int step = 0; step < 5; ++step) {
      const Tensor x = rand({20, 24});
      const Tensor y = labels(20, 6);
      const Tensor xg = on_gpu(x), yg = on_gpu(y);
      const Variable lc = oc->update([&] { return softmax_cross_entropy(mc(Variable(x)), y); });
      const Variable lg = og->update([&] { return softmax_cross_entropy(mg(Variable(xg)), yg); });
      expect_close(lg.data(), lc.data(), 1e-4f, 1e-5f, name + " loss at step " + std::to_string(step));
    }
    EXPECT_EQ(og->t(), 5);
    expect_close(mg.arena().params(), mc.arena().params(), 1e-4f, 1e-5f, name + " parameters");
    const auto sc = oc->state(), sg = og->state();
    ASSERT_EQ(sc.size(), sg.size());
    for (std::size_t i = 0; i < sc.size(); ++i) {
      EXPECT_EQ(sg[i].second.device(), gpu());
      expect_close(sg[i].second, sc[i].second, 1e-4f, 1e-6f, name + " state " + sc[i].first);
    }
  }
};

TEST_F(OptimTest, Sgd) {
  for (float wd : {0.f, 1e-2f})
    check<optim::SGD>("SGD", wd, [] { return std::make_unique<optim::SGD>(0.1f); });
}

TEST_F(OptimTest, MomentumSgd) {
  for (float wd : {0.f, 1e-2f})
    check<optim::MomentumSGD>("MomentumSGD", wd, [] { return std::make_unique<optim::MomentumSGD>(0.05f, 0.9f); });
}

TEST_F(OptimTest, Adam) {
  for (float wd : {0.f, 1e-2f})
    check<optim::Adam>("Adam", wd, [] { return std::make_unique<optim::Adam>(1e-2f); });
}

}  // namespace
}  // namespace dpl::test
