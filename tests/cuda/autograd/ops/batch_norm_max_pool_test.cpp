// batch_norm_relu_max_pool2d, a network's stem, fused on the GPU (one pass normalising, applying
// the ReLU and pooling; backward gathering the pooled gradient in its passes over x) against the
// composition max_pool2d(batch_norm_relu(...)) on the same GPU.
//
// The forward pass and the running statistics must match to the bit: the fused pass rounds each
// normalised value to the dtype before the window compares them, as the composition stores them.
// Gradients differ only by the order of the sums and, in 16 bits, by where a pixel that wins two
// windows has its two gradients rounded (once, as their sum, in the composition; not at all in
// the fused reduction): rtol/atol below.
#include <cmath>
#include <string>
#include <vector>

#include "image_agreement.hpp"

namespace dpl::test {
namespace {

struct StemCase {
  Shape shape;
  Size2d kernel, stride, padding;
};

class BatchNormReluMaxPoolTest : public CudaTest {
 protected:
  // x's ChannelSums (float32 on the GPU), as a convolution's epilogue would give them.
  static ChannelSums sums_of(const Tensor& x) {
    const std::int64_t c = x.size(1);
    const Tensor xf = x.to(Device::cpu()).to(kFloat32).contiguous();
    const std::vector<float> v = xf.to_vector<float>();
    std::vector<float> s(static_cast<std::size_t>(c), 0.f), q(static_cast<std::size_t>(c), 0.f);
    const std::int64_t hw = x.size(2) * x.size(3);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto ch = static_cast<std::size_t>((static_cast<std::int64_t>(i) / hw) % c);
      s[ch] += v[i];
      q[ch] += v[i] * v[i];
    }
    return {on_gpu(Tensor::from_vector(s, {c})), on_gpu(Tensor::from_vector(q, {c}))};
  }
};

// ResNet's stem window (3x3, stride 2, padding 1: at most 2x2 windows hold a pixel) with 64 and
// an odd 37 channels (the 16-byte and the one-element paths); a 5x5 stride-1 window (up to 25
// windows a pixel: the general gather); 2x2 stride 2 (every pixel in one window). Each with and
// without the statistics from sums (the latter with a gradient already in x's buffer), in every
// dtype.
TEST_F(BatchNormReluMaxPoolTest, FusedStemIsTheComposition) {
  const std::vector<StemCase> cases = {{{4, 64, 16, 18}, 3, 2, 1},
                                       {{3, 37, 9, 7}, 3, 2, 1},
                                       {{2, 16, 10, 10}, 5, 1, 2},
                                       {{2, 24, 8, 8}, 2, 2, 0}};
  for (const StemCase& sc : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat16})
      for (bool with_sums : {false, true}) {
        SCOPED_TRACE(shape_str(sc.shape) + " kernel " + std::to_string(sc.kernel.h) + " " + dtype_name(t) +
                     (with_sums ? " from sums" : " from x"));
        const std::int64_t c = sc.shape[1];
        const Tensor x = channels_last(on_gpu(rand(sc.shape, -2.f, 2.f).to(t)));
        const ChannelSums sums = with_sums ? sums_of(x) : ChannelSums{};
        // Some negative weights, so that the ReLU cuts both ends of a channel's values.
        const Tensor w = rand({c}, -1.5f, 1.5f), b = rand({c}, -0.5f, 0.5f);
        const Tensor rm = rand({c}), rv = rand({c}, 0.5f, 2.f);
        const Tensor prior = channels_last(on_gpu(rand(sc.shape).to(t)));
        // 16-bit parameters (a model cast by optim::MixedPrecision) in the 64-channel case.
        const DType param_dtype = c == 64 ? t : kFloat32;
        Tensor outs[2], gx[2], gw[2], gb[2], means[2], vars[2];
        for (int fused = 0; fused < 2; ++fused) {
          Variable xv(channels_last(x), true), wv(on_gpu(w).to(param_dtype), true), bv(on_gpu(b).to(param_dtype), true);
          if (with_sums) xv.set_grad(prior.clone());  // backward adds into it: through scratch
          Tensor rmv = on_gpu(rm), rvv = on_gpu(rv);
          const ChannelSums* given = with_sums ? &sums : nullptr;
          const Variable y =
              fused == 1 ? batch_norm_relu_max_pool2d(xv, wv, bv, rmv, rvv, true, sc.kernel, sc.stride, sc.padding,
                                                      0.1, 1e-5, given)
                         : max_pool2d(batch_norm_relu(xv, wv, bv, rmv, rvv, true, 0.1, 1e-5, given), sc.kernel,
                                      sc.stride, sc.padding);
          // The fused op ran as one node (not composed), on channels-last data.
          ASSERT_TRUE(y.creator() != nullptr);
          EXPECT_EQ(std::string(y.creator()->name()), fused == 1 ? "batch_norm_relu_max_pool2d" : "max_pool2d");
          EXPECT_TRUE(y.data().is_channels_last());
          outs[fused] = y.data().to(Device::cpu()).to(kFloat32);
          Generator g(7);
          const Tensor up = Tensor::uniform(y.shape(), -1.f, 1.f, g).to(t);
          sum(mul(y, Variable(channels_last(on_gpu(up))))).backward();
          gx[fused] = xv.grad().to(Device::cpu()).to(kFloat32);
          gw[fused] = wv.grad().to(Device::cpu()).to(kFloat32);
          gb[fused] = bv.grad().to(Device::cpu()).to(kFloat32);
          means[fused] = rmv.to(Device::cpu());
          vars[fused] = rvv.to(Device::cpu());
        }
        ASSERT_EQ(outs[1].shape(), outs[0].shape());
        expect_equal<float>(outs[1], outs[0], "forward");
        expect_equal<float>(means[1], means[0], "running_mean");
        expect_equal<float>(vars[1], vars[0], "running_var");
        expect_close(gx[1], gx[0], rtol_of(t, 1e-3f), operand_atol(t, 1e-4f), "input gradient");
        const float param_rtol = rtol_of(param_dtype, 1e-3f), param_atol = t == kFloat32 ? 1e-3f : 5e-2f;
        expect_close(gw[1], gw[0], param_rtol, param_atol, "weight gradient");
        expect_close(gb[1], gb[0], param_rtol, param_atol, "bias gradient");
      }
}

// Evaluation mode, and NCHW images, compose the two ops: the same results as the composition.
TEST_F(BatchNormReluMaxPoolTest, EvaluationAndNchwCompose) {
  const Shape shape{2, 8, 9, 9};
  const Tensor w = on_gpu(rand({8}, 0.5f, 1.5f)), b = on_gpu(rand({8})), rm = on_gpu(rand({8}));
  const Tensor rv = on_gpu(rand({8}, 0.5f, 2.f));
  NoGradGuard no_grad;
  for (bool nhwc : {false, true})
    for (bool training : {false, true}) {
      if (nhwc && training) continue;  // the fused case, above
      const Tensor x = nhwc ? channels_last(on_gpu(rand(shape))) : on_gpu(rand(shape));
      Tensor rm1 = rm.clone(), rv1 = rv.clone(), rm2 = rm.clone(), rv2 = rv.clone();
      const Tensor a = batch_norm_relu_max_pool2d(Variable(x), Variable(w), Variable(b), rm1, rv1, training, 3, 2, 1)
                           .data()
                           .to(Device::cpu());
      const Tensor e =
          max_pool2d(batch_norm_relu(Variable(x), Variable(w), Variable(b), rm2, rv2, training), 3, 2, 1)
              .data()
              .to(Device::cpu());
      expect_equal<float>(a, e, nhwc ? "channels-last evaluation" : training ? "NCHW training" : "NCHW evaluation");
      expect_equal<float>(rm1.to(Device::cpu()), rm2.to(Device::cpu()), "running_mean");
    }
}

}  // namespace
}  // namespace dpl::test
