// The convolution that also computes its output's per-channel sums (conv2d_with_sums) and batch
// normalisation that takes its statistics from such sums instead of a pass of its own. Which
// convolutions fuse: on sm_90 with CUTLASS in the build, 1x1 stride-1 ones in bfloat16 and float16
// (a matrix product with the sums in its epilogue), and float32 ones there while TF32 is allowed;
// elsewhere float16 ones on cuDNN's convolution with generated statistics (conv2d_forward_sums_cuda
// says why not bfloat16). The rest must come back unfused with conv2d's output.
//
// Tolerances: where the sums are fused, the convolution runs on another kernel than conv2d's, so
// 16-bit outputs may differ by a rounding (rtol 1e-2 bfloat16, 2e-3 float16; 1e-4 float32), and
// cuDNN may take the sums before the output is rounded to 16 bits: each may differ from the sum of
// the stored output by up to half a unit in the last place of every element (4e-3 bfloat16, 1e-3
// float16 of the sum of magnitudes; 1e-5 float32). Batch norm from sums differs from its Welford
// pass only in how the variance is rounded (rtol 1e-4 on the float32 statistics, the dtype's
// tolerance on 16-bit outputs).

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class ConvSumsTest : public CudaTest {};

float output_rtol(DType t) { return t == kBFloat16 ? 1e-2f : t == kFloat16 ? 2e-3f : 1e-4f; }
float sums_rtol(DType t) { return t == kBFloat16 ? 4e-3f : t == kFloat16 ? 1e-3f : 1e-5f; }

struct ConvCase {
  Shape x;
  std::int64_t out, k, stride;
};

// Per channel of a channels-last (or any) 4-D tensor: sum, sum of squares, sum of magnitudes and
// of squares' magnitudes, in double on the host.
struct HostSums {
  std::vector<double> sum, squares, magnitude;
};
HostSums host_sums(const Tensor& y) {
  const std::int64_t n = y.size(0), c = y.size(1), h = y.size(2), w = y.size(3);
  const Tensor t = y.to(Device::cpu()).to(kFloat32).contiguous();
  const std::vector<float> v = t.to_vector<float>();
  HostSums s{std::vector<double>(c), std::vector<double>(c), std::vector<double>(c)};
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t p = 0; p < h * w; ++p) {
        const double e = v[static_cast<std::size_t>((i * c + ch) * h * w + p)];
        s.sum[ch] += e;
        s.squares[ch] += e * e;
        s.magnitude[ch] += std::fabs(e);
      }
  return s;
}

TEST_F(ConvSumsTest, ConvolutionWithSumsIsTheConvolutionAndTheSumsOfItsOutput) {
  // Small odd cases, then the convolutions of a ResNet-18 on 64x64 images, batch 8.
  const std::vector<ConvCase> cases = {{{4, 64, 14, 14}, 64, 3, 1},  {{4, 32, 16, 16}, 128, 1, 2},
                                       {{2, 3, 20, 20}, 16, 7, 2},   {{8, 3, 64, 64}, 64, 7, 2},
                                       {{8, 64, 16, 16}, 64, 3, 1},  {{8, 64, 16, 16}, 128, 3, 2},
                                       {{8, 128, 8, 8}, 128, 3, 1},  {{8, 128, 8, 8}, 256, 3, 2},
                                       {{8, 256, 4, 4}, 256, 3, 1},  {{8, 256, 4, 4}, 512, 3, 2},
                                       {{8, 512, 2, 2}, 512, 3, 1},  {{8, 64, 16, 16}, 128, 1, 2},
                                       // 1x1 stride 1, a ResNet-50 bottleneck's: rows (N*H*W) not a
                                       // multiple of the product's 128-row tile, channel counts
                                       // that fill a 128-column tile partly, once or several times.
                                       {{4, 64, 14, 14}, 256, 1, 1}, {{3, 72, 9, 11}, 40, 1, 1},
                                       {{8, 256, 16, 16}, 64, 1, 1}, {{2, 16, 7, 7}, 136, 1, 1},
                                       {{1, 8, 3, 5}, 8, 1, 1},      {{16, 512, 7, 7}, 2048, 1, 1},
                                       // 200 row tiles: their partials folded in two stages.
                                       {{4, 64, 80, 80}, 64, 1, 1},
                                       // and those of a ResNet-50 on 64x64 images, batch 8.
                                       {{8, 64, 16, 16}, 64, 1, 1},  {{8, 256, 16, 16}, 128, 1, 1},
                                       {{8, 128, 8, 8}, 512, 1, 1},  {{8, 1024, 4, 4}, 256, 1, 1},
                                       {{8, 512, 2, 2}, 2048, 1, 1}, {{8, 2048, 2, 2}, 512, 1, 1},
                                       // 1x1 with 12 input channels: not a multiple of 8, left to cuDNN.
                                       {{2, 12, 5, 5}, 24, 1, 1}};
  const Tf32Scope full_float32(false);  // the float32 cases compare against float32 products
  int fused = 0;
  for (DType t : {kBFloat16, kFloat16, kFloat32})
    for (const ConvCase& c : cases) {
      const std::string what = std::string(dtype_name(t)) + " x " + shape_str(c.x) + " k" + std::to_string(c.k) +
                               " s" + std::to_string(c.stride) + " -> " + std::to_string(c.out);
      SCOPED_TRACE(what);
      const Tensor x = on_gpu(rand(c.x).to(t)).to_channels_last();
      const Tensor w = on_gpu(rand({c.out, c.x[1], c.k, c.k}, -0.2f, 0.2f).to(t)).to_channels_last();
      const Conv2dPair stride{c.stride, c.stride}, padding{c.k / 2, c.k / 2};
      const Tensor want = conv2d(Variable(x), Variable(w), Variable(), stride, padding).data();
      ChannelSums sums;
      sums.sum = Tensor::zeros({1});  // must be replaced, defined or not
      const Tensor got = conv2d_with_sums(Variable(x), Variable(w), sums, stride, padding).data();
      ASSERT_EQ(got.memory_format(), MemoryFormat::kChannelsLast);
      expect_close(got.to(Device::cpu()), want.to(Device::cpu()), output_rtol(t), output_rtol(t), "output");
      const bool must_fuse = cutlass_products_run() && t != kFloat32 && c.k == 1 && c.stride == 1 &&
                             c.x[1] % 8 == 0 && c.out % 8 == 0;
      if (must_fuse) {
        EXPECT_TRUE(sums.defined()) << "CUTLASS's 1x1 product should have taken this case";
      }
      if (!sums.defined()) {
        EXPECT_FALSE(sums.sum_of_squares.defined());
        std::cout << "[ conv2d_with_sums ] not fused: " << what << "\n";
        continue;
      }
      ++fused;
      std::cout << "[ conv2d_with_sums ] fused: " << what << "\n";
      ASSERT_EQ(sums.sum.shape(), Shape{c.out});
      ASSERT_EQ(sums.sum_of_squares.shape(), Shape{c.out});
      const HostSums h = host_sums(got);
      const std::vector<float> s = sums.sum.to(Device::cpu()).to_vector<float>();
      const std::vector<float> q = sums.sum_of_squares.to(Device::cpu()).to_vector<float>();
      // CUTLASS's product sums the rounded outputs it stores: they must agree with the host's sums of
      // them up to float additions (each under 1e-6 of the magnitudes summed; 1e-5 leaves room).
      const double rtol = must_fuse ? 1e-5 : sums_rtol(t);
      for (std::int64_t ch = 0; ch < c.out; ++ch) {
        const double tol_sum = rtol * h.magnitude[ch] + 1e-3;
        const double tol_sq = 2.0 * rtol * h.squares[ch] + 1e-3;
        EXPECT_NEAR(s[ch], h.sum[ch], tol_sum) << "sum of channel " << ch;
        EXPECT_NEAR(q[ch], h.squares[ch], tol_sq) << "sum of squares of channel " << ch;
      }
    }
  RecordProperty("fused_cases", fused);
}

// float32 1x1 convolutions while TF32 is allowed: on sm_90 with CUTLASS they fuse, multiplied as
// TF32, as cuDNN's own convolution then multiplies them; so the output may differ from conv2d's by
// the two products' TF32 roundings (1e-2 of the magnitudes, as bfloat16 is allowed), while the sums
// are those of the stored output up to float additions (1e-5).
TEST_F(ConvSumsTest, Float32WithTF32FusesThe1x1Convolutions) {
  const std::vector<ConvCase> cases = {{{4, 64, 14, 14}, 256, 1, 1}, {{3, 72, 9, 11}, 40, 1, 1},
                                       {{8, 256, 16, 16}, 64, 1, 1}, {{16, 512, 7, 7}, 2048, 1, 1},
                                       {{2, 12, 5, 5}, 24, 1, 1}};
  const Tf32Scope tf32(true);
  for (const ConvCase& c : cases) {
    const std::string what = "x " + shape_str(c.x) + " -> " + std::to_string(c.out);
    SCOPED_TRACE(what);
    const Tensor x = on_gpu(rand(c.x)).to_channels_last();
    const Tensor w = on_gpu(rand({c.out, c.x[1], 1, 1}, -0.2f, 0.2f)).to_channels_last();
    const Tensor want = conv2d(Variable(x), Variable(w)).data();
    ChannelSums sums;
    const Tensor got = conv2d_with_sums(Variable(x), Variable(w), sums).data();
    expect_close(got.to(Device::cpu()), want.to(Device::cpu()), 1e-2f, 1e-2f, "output");
    const bool must_fuse = cutlass_products_run() && c.x[1] % 8 == 0 && c.out % 8 == 0;
    EXPECT_EQ(sums.defined(), must_fuse) << "fused where CUTLASS's product takes the case, and only there";
    if (!sums.defined()) continue;
    const HostSums h = host_sums(got);
    const std::vector<float> s = sums.sum.to(Device::cpu()).to_vector<float>();
    const std::vector<float> q = sums.sum_of_squares.to(Device::cpu()).to_vector<float>();
    for (std::int64_t ch = 0; ch < c.out; ++ch) {
      EXPECT_NEAR(s[ch], h.sum[ch], 1e-5 * h.magnitude[ch] + 1e-3) << "sum of channel " << ch;
      EXPECT_NEAR(q[ch], h.squares[ch], 2e-5 * h.squares[ch] + 1e-3) << "sum of squares of channel " << ch;
    }
  }
}

// batch_norm, batch_norm_relu and batch_norm_add_relu given x's sums (computed here on the host)
// against the same calls without them: outputs, running statistics and every gradient.
// Up to 1024 channels the elementwise pass computes the statistics itself (block 0 records them);
// 1032 takes the finalize kernel before it.
TEST_F(ConvSumsTest, BatchNormFromSumsIsBatchNorm) {
  for (const Shape& shape : {Shape{8, 64, 12, 12}, Shape{2, 1032, 5, 3}})
    for (DType t : {kBFloat16, kFloat16, kFloat32})
      for (int kind = 0; kind < 3; ++kind) {
        const std::int64_t c = shape[1];
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + shape_str(shape) +
                     (kind == 0 ? " batch_norm" : kind == 1 ? " +relu" : " +add+relu"));
        const Tensor x0 = on_gpu(rand(shape, -1.f, 3.f).to(t)).to_channels_last();
        const Tensor z0 = on_gpu(rand(shape).to(t)).to_channels_last();
        const Tensor gy = on_gpu(rand(shape).to(t)).to_channels_last();
        const Tensor w = rand({c}, 0.5f, 1.5f), b = rand({c}), rm = rand({c}), rv = rand({c}, 0.5f, 2.f);
        const HostSums h = host_sums(x0);
        const std::vector<float> sum_v(h.sum.begin(), h.sum.end()), squares_v(h.squares.begin(), h.squares.end());
        const ChannelSums sums{on_gpu(Tensor::from_vector(sum_v, {c})), on_gpu(Tensor::from_vector(squares_v, {c}))};
        Tensor out[2], grads[2][4], running[2][2];
        for (int given = 0; given < 2; ++given) {
          Variable x(x0, true), z(z0, true), wv(on_gpu(w), true), bv(on_gpu(b), true);
          Tensor m = on_gpu(rm), v = on_gpu(rv);
          const ChannelSums* s = given ? &sums : nullptr;
          const Variable y = kind == 0   ? batch_norm(x, wv, bv, m, v, true, 0.1, 1e-5, s)
                             : kind == 1 ? batch_norm_relu(x, wv, bv, m, v, true, 0.1, 1e-5, s)
                                         : batch_norm_add_relu(x, z, wv, bv, m, v, true, 0.1, 1e-5, s);
          sum(mul(y, Variable(gy))).backward();
          out[given] = y.data().to(Device::cpu());
          grads[given][0] = x.grad().to(Device::cpu());
          grads[given][1] = wv.grad().to(Device::cpu());
          grads[given][2] = bv.grad().to(Device::cpu());
          grads[given][3] = kind == 2 ? z.grad().to(Device::cpu()) : Tensor::zeros({1});
          running[given][0] = m.to(Device::cpu());
          running[given][1] = v.to(Device::cpu());
        }
        const float r = output_rtol(t);
        expect_close(out[1], out[0], r, r, "output");
        expect_close(running[1][0], running[0][0], 1e-4f, 1e-5f, "running_mean");
        expect_close(running[1][1], running[0][1], 1e-4f, 1e-5f, "running_var");
        expect_close(grads[1][0], grads[0][0], 5 * r, 5 * r, "input gradient");
        expect_close(grads[1][1], grads[0][1], 1e-2f, 5 * r, "weight gradient");
        expect_close(grads[1][2], grads[0][2], 1e-2f, 5 * r, "bias gradient");
        expect_close(grads[1][3], grads[0][3], r, r, "residual gradient");
      }
}

TEST_F(ConvSumsTest, SumsOfTheWrongShapeAreRefused) {
  const Tensor x = on_gpu(rand({2, 8, 4, 4}).to(kBFloat16)).to_channels_last();
  const ChannelSums wrong{on_gpu(Tensor::zeros({7})), on_gpu(Tensor::zeros({7}))};
  try {
    batch_norm_relu(Variable(x), Variable(), Variable(), Tensor(), Tensor(), true, 0.1, 1e-5, &wrong);
    FAIL() << "sums of 7 channels for an input of 8 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected sums of float32 (8,)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpl::test
