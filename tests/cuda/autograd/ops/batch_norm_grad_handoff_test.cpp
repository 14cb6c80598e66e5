// The hand-off of a residual batch norm's backward reductions to the convolution that completes
// its output's gradient (OutputGradReductions in src/autograd/ops/support.hpp): out =
// relu(bn(x) + z) feeds a 1x1 convolution and a second term of the loss, whose contribution
// arrives first; the convolution's data gradient then completes out's gradient
// and, on sm_90 with CUTLASS, also masks it and computes the batch norm's reductions. The same
// graph with an identity op (multiplying by one) between the batch norm and the convolution never
// hands off: every gradient must agree with it. Both sides round the completed gradient once to
// the dtype and differ in the order of the float additions (the product's and the reductions'),
// so the tensor gradients agree within the dtype's tolerances of the convolution tests (rtol 1e-2
// and atol 0.1 bfloat16, 2e-3 and 0.02 float16). The batch norm's parameter gradients are sums
// over the gradient, which the hand-off takes before that rounding and the separate pass after
// it: beyond 1e-3 they may differ by the rounding's bound, u * sum |g| * |x - mean| * invstd for the weight
// and u * sum |g| for the bias (u = 2^-8 bfloat16, 2^-11 float16; g is the residual's gradient).
// float32 runs with TF32 allowed (the product takes float32 only then, as cuDNN's convolutions
// then multiply it): both sides' data gradients are TF32 products, within 5e-3 of each other.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops/support.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class BatchNormGradHandoffTest : public CudaTest {
 protected:
  // Per channel, u * sum |g| * |x - mean| * invstd ([0]) and u * sum |g| ([1]), with the batch's
  // mean and invstd (eps 1e-5) of x.
  const std::vector<double>* parameter_rounding_bounds(const Tensor& x, const Tensor& g, double u) {
    const Shape& s = x.shape();
    const std::int64_t c = s[1], hw = s[2] * s[3], n = s[0] * hw;
    const std::vector<float> xv = x.to(Device::cpu()).to(kFloat32).to_vector<float>();
    const std::vector<float> gv = g.to(Device::cpu()).to(kFloat32).to_vector<float>();
    bounds_[0].assign(static_cast<std::size_t>(c), 0.0);
    bounds_[1].assign(static_cast<std::size_t>(c), 0.0);
    // Element k of channel ch, k running over images and pixels (x and g come back contiguous).
    auto at = [&](std::int64_t ch, std::int64_t k) {
      return static_cast<std::size_t>((k / hw * c + ch) * hw + k % hw);
    };
    for (std::int64_t ch = 0; ch < c; ++ch) {
      double mean = 0.0, var = 0.0;
      for (std::int64_t k = 0; k < n; ++k) mean += xv[at(ch, k)];
      mean /= static_cast<double>(n);
      for (std::int64_t k = 0; k < n; ++k) var += (xv[at(ch, k)] - mean) * (xv[at(ch, k)] - mean);
      const double invstd = 1.0 / std::sqrt(var / static_cast<double>(n) + 1e-5);
      double w = 0.0, b = 0.0;
      for (std::int64_t k = 0; k < n; ++k) {
        w += std::fabs(gv[at(ch, k)]) * std::fabs(xv[at(ch, k)] - mean);
        b += std::fabs(gv[at(ch, k)]);
      }
      bounds_[0][static_cast<std::size_t>(ch)] = u * w * invstd;
      bounds_[1][static_cast<std::size_t>(ch)] = u * b;
    }
    return bounds_;
  }

 private:
  std::vector<double> bounds_[2];
};

TEST_F(BatchNormGradHandoffTest, GradientsMatchTheGraphWithoutTheHandoff) {
  const Tf32Scope tf32(true);
  for (DType t : {kBFloat16, kFloat16, kFloat32})
    for (const Shape& shape : {Shape{4, 64, 14, 14}, Shape{2, 256, 7, 9}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + shape_str(shape));
      const std::int64_t c = shape[1], o = 2 * c;
      const Tensor x0 = on_gpu(rand(shape, -1.f, 2.f).to(t)).to_channels_last();
      const Tensor z0 = on_gpu(rand(shape).to(t)).to_channels_last();
      const Tensor w0 = on_gpu(rand({o, c, 1, 1}, -0.2f, 0.2f).to(t)).to_channels_last();
      const Tensor r1 = on_gpu(rand({shape[0], o, shape[2], shape[3]}).to(t)).to_channels_last();
      const Tensor r2 = on_gpu(rand(shape).to(t)).to_channels_last();
      const Tensor gamma = rand({c}, 0.5f, 1.5f), beta = rand({c});
      const Tensor ones = Tensor::ones(shape, TensorOptions(t, gpu())).to_channels_last();
      Tensor grads[2][5];
      for (int identity = 0; identity < 2; ++identity) {
        Variable x(x0, true), z(z0, true), w(w0, true), gv(on_gpu(gamma), true), bv(on_gpu(beta), true);
        Tensor rm = Tensor::zeros({c}, TensorOptions(kFloat32, gpu()));
        Tensor rv = Tensor::ones({c}, TensorOptions(kFloat32, gpu()));
        const Variable out = batch_norm_add_relu(x, z, gv, bv, rm, rv, true, 0.1, 1e-5);
        const Variable into_conv = identity ? mul(out, Variable(ones)) : out;
        const Variable y = conv2d(into_conv, w);
        // The convolution's term first: the engine's order (the reverse of a depth-first walk of
        // the inputs) then runs the convolution's backward after out's own term, so that its data
        // gradient completes out's gradient, as in a residual network.
        const Variable loss = add(sum(mul(y, Variable(r1))), sum(mul(out, Variable(r2))));
        const std::uint64_t before = ops_detail::output_grad_reductions_filled();
        loss.backward();
        const std::uint64_t want = !identity && cutlass_products_run() ? 1u : 0u;
        EXPECT_EQ(ops_detail::output_grad_reductions_filled() - before, want)
            << (identity ? "with the identity op between" : "batch norm straight into the convolution");
        grads[identity][0] = x.grad().to(Device::cpu());
        grads[identity][1] = z.grad().to(Device::cpu());
        grads[identity][2] = w.grad().to(Device::cpu());
        grads[identity][3] = gv.grad().to(Device::cpu());
        grads[identity][4] = bv.grad().to(Device::cpu());
      }
      const float tol = t == kBFloat16 ? 1e-2f : t == kFloat16 ? 2e-3f : 5e-3f;
      const char* names[5] = {"x", "z (the residual)", "conv weight", "bn weight", "bn bias"};
      for (int i = 0; i < 3; ++i)
        expect_close(grads[0][i].to(kFloat32), grads[1][i].to(kFloat32), tol, 10 * tol, names[i]);
      const double u = t == kBFloat16 ? std::ldexp(1.0, -8) : t == kFloat16 ? std::ldexp(1.0, -11) : 0.0;
      const std::vector<double>* bounds = parameter_rounding_bounds(x0, grads[1][1], u);
      for (int i = 3; i < 5; ++i)
        expect_close_with(grads[0][i].to(kFloat32), grads[1][i].to(kFloat32), 1e-3f, 1e-2f, bounds[i - 3], names[i]);
    }
}

}  // namespace
}  // namespace dpl::test
