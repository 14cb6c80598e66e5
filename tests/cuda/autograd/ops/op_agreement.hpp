#pragma once
// CPU-vs-CUDA agreement of an autograd op, forward and backward. Each op runs on the same fresh
// random leaves on both devices; the backward pass starts from sum(y * w) with a random w, so
// every element of every gradient matters.
//
// Gradients are checked twice: written into fresh buffers (the allocator's cache is first filled
// with NaN blocks of the same sizes, so an element the backward kernels skip shows up), and
// accumulated into existing ones (beta 1).

#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {

/// The fixture of the op agreement tests: check(name, input shapes, op) runs op on both devices.
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

}  // namespace dpl::test
