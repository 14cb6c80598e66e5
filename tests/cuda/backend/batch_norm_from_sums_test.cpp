// Channels-last batch-norm backward from given reductions (batch_norm_nhwc_backward_from_sums):
// for a gradient that arrives masked, with the sums of g and g · (x − mean) computed where it was
// completed, against the kernels' own backward on the same g (no ReLU, so g is used as given).
// Both run the same finalize and elementwise passes; only the sums' order of addition differs
// (float32 on both sides): gx within the dtype's rounding plus 1e-4 of its scale, the
// parameters' gradients within 1e-4.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/batch_norm_nhwc.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

using backend::cuda_detail::batch_norm_nhwc_backward;
using backend::cuda_detail::batch_norm_nhwc_backward_from_sums;

class BatchNormFromSumsTest : public CudaTest {};

TEST_F(BatchNormFromSumsTest, GivenSumsGiveTheSameGradients) {
  for (DType t : {kBFloat16, kFloat16, kFloat32})
    // Up to 1024 channels the elementwise pass computes the coefficients itself, each block in
    // its own memory; 1032 takes the finalize kernel before it.
    for (const Shape& shape : {Shape{4, 64, 7, 9}, Shape{2, 40, 5, 5}, Shape{3, 24, 16, 16}, Shape{2, 1032, 3, 5}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + shape_str(shape));
      const std::int64_t c = shape[1], n = shape[0] * shape[2] * shape[3];
      const Tensor x = rand(shape, -1.f, 3.f).to(t), g = rand(shape).to(t);
      const Tensor mean = rand({c}), invstd = rand({c}, 0.5f, 2.f), weight = rand({c}, 0.5f, 1.5f);
      // The sums on the host, per channel, in double.
      const std::vector<float> xv = x.to(kFloat32).to_vector<float>(), gv = g.to(kFloat32).to_vector<float>();
      const std::vector<float> mv = mean.to_vector<float>();
      std::vector<float> sg(c), sgx(c);
      const std::int64_t hw = shape[2] * shape[3];
      for (std::int64_t ch = 0; ch < c; ++ch) {
        double a = 0.0, b = 0.0;
        for (std::int64_t i = 0; i < shape[0]; ++i)
          for (std::int64_t p = 0; p < hw; ++p) {
            const auto at = static_cast<std::size_t>((i * c + ch) * hw + p);
            a += gv[at];
            b += gv[at] * (static_cast<double>(xv[at]) - mv[ch]);
          }
        sg[ch] = static_cast<float>(a);
        sgx[ch] = static_cast<float>(b);
      }
      const Tensor xg = on_gpu(x).to_channels_last(), gg = on_gpu(g).to_channels_last();
      const Tensor meang = on_gpu(mean), invstdg = on_gpu(invstd), wg = on_gpu(weight);
      // clone() is contiguous: each output is poisoned and made channels-last on its own.
      Tensor gx_ref = on_gpu(poisoned(shape).to(t)).to_channels_last();
      Tensor gx = on_gpu(poisoned(shape).to(t)).to_channels_last();
      // The parameters' gradients accumulate (beta 1) onto what they held: added once per channel
      // however many blocks the pass has.
      Tensor gw_ref = on_gpu(rand({c})), gb_ref = on_gpu(rand({c}));
      Tensor gw = gw_ref.clone(), gb = gb_ref.clone();
      batch_norm_nhwc_backward(xg, nullptr, nullptr, gg, wg, meang, invstdg, 0.f, gx_ref, nullptr, 1.f, gw_ref, gb_ref);
      batch_norm_nhwc_backward_from_sums(xg, gg, on_gpu(Tensor::from_vector(sg, {c})),
                                         on_gpu(Tensor::from_vector(sgx, {c})), wg, meang, invstdg, 0.f, gx, 1.f, gw,
                                         gb);
      const float rtol = t == kBFloat16 ? 1.f / 128 : t == kFloat16 ? 1.f / 1024 : 1e-5f;
      expect_close(gx.to(Device::cpu()), gx_ref.to(Device::cpu()), rtol, 1e-4f, "gx");
      expect_close(gw.to(Device::cpu()), gw_ref.to(Device::cpu()), 1e-4f, 1e-4f, "gweight");
      expect_close(gb.to(Device::cpu()), gb_ref.to(Device::cpu()), 1e-4f, 1e-4f * static_cast<float>(n) / 100, "gbias");
    }
}

}  // namespace
}  // namespace dpl::test
