// CPU-vs-CUDA agreement of every autograd op (dpl/autograd/ops.hpp), forward and backward.
// Each op runs on the same fresh random leaves on both devices; the backward pass starts from
// sum(y * w) with a random w, so every element of every gradient matters.
//
// Gradients are checked twice: written into fresh buffers (the allocator's cache is first filled
// with NaN blocks of the same sizes, so an element the backward kernels skip shows up), and
// accumulated into existing ones (beta 1).
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <cmath>
#include <functional>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class AutogradTest : public CudaTest {
 protected:
  struct Leaf {
    Variable cpu, gpu;
  };
  Leaf leaf(const Shape& s) {
    const Tensor t = rand(s);
    return {Variable(t.clone(), true), Variable(on_gpu(t), true)};
  }

  // Fills the GPU allocator's cache with NaN blocks of the given shapes, so that fresh gradient
  // buffers handed out next hold NaN where nothing is written.
  static void poison_cache(const std::vector<Shape>& shapes) {
    std::vector<Tensor> held;
    for (int copies = 0; copies < 3; ++copies)
      for (const Shape& s : shapes) held.push_back(poisoned(s));
  }

  using Op = std::function<Variable(const std::vector<Variable>&)>;

  // Runs op on both devices, compares the outputs and the gradients of every input, first into
  // fresh gradient buffers, then accumulated onto existing ones.
  void check(const std::string& name, const std::vector<Shape>& shapes, const Op& op, float rtol = 1e-5f,
             float atol = 1e-5f) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(name + (accumulate ? " (accumulating gradients)" : " (fresh gradients)"));
      std::vector<Variable> xc, xg;
      std::vector<Tensor> g0;
      for (const Shape& s : shapes) {
        Leaf l = leaf(s);
        if (accumulate) {
          const Tensor g = rand(s);
          l.cpu.set_grad(g.clone());
          l.gpu.set_grad(on_gpu(g));
          g0.push_back(g);
        }
        xc.push_back(l.cpu);
        xg.push_back(l.gpu);
      }
      const Variable yc = op(xc);
      const Variable yg = op(xg);
      ASSERT_EQ(yg.device(), gpu());
      expect_close(yg.data(), yc.data(), rtol, atol, name + " forward");

      const Tensor w = rand(yc.shape());
      sum(mul(yc, Variable(w))).backward();
      if (!accumulate) poison_cache(shapes);
      sum(mul(yg, Variable(on_gpu(w)))).backward();
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        ASSERT_TRUE(xg[i].grad().defined()) << name << " input " << i << " got no gradient on the GPU";
        expect_close(xg[i].grad(), xc[i].grad(), rtol, atol, name + " grad of input " + std::to_string(i));
      }
    }
  }
};

TEST_F(AutogradTest, Matmul) {
  check("matmul", {{5, 7}, {7, 3}}, [](const auto& x) { return matmul(x[0], x[1]); }, 1e-5f, 1e-4f);
  // The same variable twice: the engine writes one gradient to scratch and adds it.
  check("matmul(a, a)", {{6, 6}}, [](const auto& x) { return matmul(x[0], x[0]); }, 1e-5f, 1e-4f);
}

TEST_F(AutogradTest, Linear) {
  check("linear with bias", {{6, 16}, {4, 16}, {4}}, [](const auto& x) { return linear(x[0], x[1], x[2]); },
        1e-5f, 1e-4f);
  check("linear without bias", {{6, 16}, {5, 16}}, [](const auto& x) { return linear(x[0], x[1]); }, 1e-5f, 1e-4f);
}

TEST_F(AutogradTest, AddSubMulEveryBroadcast) {
  const std::vector<std::pair<std::string, Shape>> seconds = {
      {"same shape", {6, 8}}, {"row", {8}}, {"one element", {1}}, {"scalar", {}}};
  for (const auto& [what, bs] : seconds) {
    check("add " + what, {{6, 8}, bs}, [](const auto& x) { return add(x[0], x[1]); });
    check("sub " + what, {{6, 8}, bs}, [](const auto& x) { return sub(x[0], x[1]); });
    check("mul " + what, {{6, 8}, bs}, [](const auto& x) { return mul(x[0], x[1]); });
  }
  check("operators", {{4, 5}, {4, 5}, {5}}, [](const auto& x) { return (x[0] + x[1]) * x[2] - x[1]; });
}

TEST_F(AutogradTest, Relu) {
  check("relu", {{7, 9}}, [](const auto& x) { return relu(x[0]); });
  check("relu vectorised", {{16, 64}}, [](const auto& x) { return relu(x[0]); });
}

TEST_F(AutogradTest, ReshapeAndFlatten) {
  check("reshape", {{4, 6}}, [](const auto& x) { return reshape(x[0], {3, -1}); });
  check("flatten", {{2, 3, 4}}, [](const auto& x) { return flatten(x[0], 1); });
}

TEST_F(AutogradTest, SumAndMean) {
  check("sum", {{10, 10}}, [](const auto& x) { return sum(x[0]); });
  check("mean", {{33, 7}}, [](const auto& x) { return mean(x[0]); });
  check("mean of a large tensor", {{1000, 1000}}, [](const auto& x) { return mean(x[0]); }, 1e-5f, 1e-6f);
}

TEST_F(AutogradTest, SoftmaxCrossEntropy) {
  const Tensor y = labels(32, 10);
  const Tensor yg = on_gpu(y);
  // The op reads its labels from the inputs' device, so each side gets its own copy.
  check("softmax_cross_entropy", {{32, 10}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y : yg);
  });
  const Tensor y2 = labels(7, 300);
  const Tensor y2g = on_gpu(y2);
  check("softmax_cross_entropy wide", {{7, 300}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y2 : y2g);
  });
}

// Device labels are not read back per call (it would stall every step); a bad one makes the
// loss NaN and never reads outside the logits. Host labels still throw.
TEST_F(AutogradTest, SoftmaxCrossEntropyBadLabelsOnTheGpuGiveNaN) {
  const Variable logits(rand({3, 4}).to(gpu()));
  const Tensor bad = Tensor::from_vector<std::int32_t>({0, 4, 1}, {3}, gpu());
  EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, bad).item()));
  const Tensor negative = Tensor::from_vector<std::int32_t>({0, -1, 1}, {3}, gpu());
  EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, negative).item()));
  const Tensor good = Tensor::from_vector<std::int32_t>({0, 3, 1}, {3}, gpu());
  EXPECT_TRUE(std::isfinite(softmax_cross_entropy(logits, good).item()));
  const Variable host_logits(Tensor::zeros({3, 4}));
  EXPECT_THROW(softmax_cross_entropy(host_logits, Tensor::from_vector<std::int32_t>({0, 4, 1}, {3})), Error);
}

TEST_F(AutogradTest, Accuracy) {
  const Tensor logits = rand({50, 10});
  const Tensor y = labels(50, 10);
  const float want = accuracy(Variable(logits), y).item();
  const Tensor got = accuracy(Variable(on_gpu(logits)), on_gpu(y));
  EXPECT_EQ(got.device(), gpu());
  EXPECT_EQ(got.item(), want);
}

TEST_F(AutogradTest, MlpForwardBackward) {
  // A whole model: parameters in arenas, gradients accumulated into the gradient arena.
  Generator g1(seed_), g2(seed_);
  nn::MLP mc(32, 20, 5, g1), mg(32, 20, 5, g2);
  mg.to(gpu());
  mc.zero_grad();
  mg.zero_grad();
  const Tensor x = rand({16, 20});
  const Tensor y = labels(16, 5);
  const Variable lc = softmax_cross_entropy(mc(Variable(x)), y);
  const Variable lg = softmax_cross_entropy(mg(Variable(on_gpu(x))), on_gpu(y));
  expect_close(lg.data(), lc.data(), 1e-5f, 1e-6f, "MLP loss");
  lc.backward();
  lg.backward();
  expect_close(mg.arena().grads(), mc.arena().grads(), 1e-4f, 1e-6f, "MLP gradient arena");
}

// --- activations, dropout, softmax, mean squared error, scalar arithmetic -----------------------------

TEST_F(AutogradTest, Activations) {
  for (const Shape& s : {Shape{7, 9}, Shape{2, 3, 4, 5}}) {
    check("leaky_relu", {s}, [](const auto& x) { return leaky_relu(x[0], 0.2f); });
    check("sigmoid", {s}, [](const auto& x) { return sigmoid(x[0]); });
    check("tanh", {s}, [](const auto& x) { return tanh(x[0]); });
    check("gelu", {s}, [](const auto& x) { return gelu(x[0]); });
  }
}

TEST_F(AutogradTest, DropoutDrawsTheSameMaskOnBothDevices) {
  check("dropout", {{3, 4, 50}}, [](const auto& x) {
    Generator g(11);  // one state per call: both devices see the same seed
    return dropout(x[0], 0.4f, g);
  });
}

TEST_F(AutogradTest, SoftmaxAndLogSoftmax) {
  for (const Shape& s : {Shape{9}, Shape{6, 10}, Shape{2, 3, 300}}) {
    check("softmax", {s}, [](const auto& x) { return softmax(x[0]); });
    check("log_softmax", {s}, [](const auto& x) { return log_softmax(x[0]); });
  }
  const Tensor logits = rand({4, 3, 17});
  EXPECT_EQ(argmax(Variable(on_gpu(logits))).to(Device::cpu()).to_vector<std::int64_t>(),
            argmax(Variable(logits)).to_vector<std::int64_t>());
}

TEST_F(AutogradTest, MseLossAndSmoothedCrossEntropy) {
  check("mse_loss", {{5, 6}, {5, 6}}, [](const auto& x) { return mse_loss(x[0], x[1]); });
  const Tensor y = labels(12, 10);
  const Tensor yg = on_gpu(y);
  check("softmax_cross_entropy smoothed", {{12, 10}}, [&](const auto& x) {
    return softmax_cross_entropy(x[0], x[0].device().is_cpu() ? y : yg, 0.1f);
  });
}

TEST_F(AutogradTest, ScalarArithmetic) {
  check("scalar arithmetic", {{4, 6}}, [](const auto& x) { return 1.f - (x[0] * 3.f + 2.f) / 4.f; });
}

}  // namespace
}  // namespace dpl::test
