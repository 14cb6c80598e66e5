// CPU-vs-CUDA agreement of scaled_dot_product_attention in float32, bfloat16 and float16, head
// dimensions 64 and 128, causal and not, Tq == Tk and Tq != Tk, heads contiguous or strided views
// of one (B, T, 3, H, D) projection: the output and the gradients of every input, written into
// fresh buffers (the allocator's cache first filled with NaN) and accumulated onto existing ones.
// Then cuDNN's fused kernels against dpl's own on the same GPU tensors (in builds with cuDNN's
// frontend; skipped otherwise), head dimensions cuDNN is not offered (which run on dpl's kernels),
// the widest register layouts, the packed form over one (B, T, 3 * H * D) projection, and operands
// on two devices.
//
// Tolerances: in float32 both devices compute in float32 and differ in the order of their sums
// (rtol 1e-4, atol 1e-5 of the largest value). In 16 bits the CPU rounds each result once, dpl's
// GPU kernels too, but cuDNN's fused kernels also round the probabilities and dS to the 16-bit
// type before their products, as flash attention does: rtol 2^-5 (bfloat16) or 2^-8 (float16), atol
// of the same fraction of the largest value.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

using Vars = std::vector<Variable>;

class AttentionTest : public CudaTest {
 protected:
  static float rtol_of(DType t) { return t == kFloat32 ? 1e-4f : t == kBFloat16 ? 1.f / 32 : 1.f / 256; }

  // |got - want| <= atol + rtol |want|, atol the dtype's fraction of the largest |want|.
  static void close(const Tensor& got, const Tensor& want, DType t, const std::string& what,
                    const Tensor& prior = Tensor()) {
    const std::vector<float> w = want.to(kFloat32).to_vector<float>();
    float largest = 0.f;
    for (float v : w) largest = std::max(largest, std::fabs(v));
    const float rtol = rtol_of(t), atol = std::max(1e-6f, largest * (t == kFloat32 ? 1e-5f : rtol));
    const Tensor g = got.to(Device::cpu());
    if (prior.defined()) return expect_close_accumulated(g, want.to(g.dtype()), prior, rtol, atol, what);
    expect_close(g, want, rtol, atol, what);
  }

  struct Problem {
    std::int64_t B, H, Tq, Tk, D, Dv;
    bool causal;
    bool strided;  // q, k, v as views of one (B, T, 3, H, D) projection (needs Tq == Tk, D == Dv)
    bool packed = false;  // the projection (B, T, 3 * H * D) through scaled_dot_product_attention_packed
  };

  static std::string name_of(const Problem& p, DType t) {
    return std::string(dtype_name(t)) + " B" + std::to_string(p.B) + " H" + std::to_string(p.H) + " Tq" +
           std::to_string(p.Tq) + " Tk" + std::to_string(p.Tk) + " D" + std::to_string(p.D) + " Dv" +
           std::to_string(p.Dv) + (p.causal ? " causal" : "") + (p.strided ? " strided" : "") +
           (p.packed ? " packed" : "");
  }

  // The leaves of a problem: q, k, v, or the one projection they are views of.
  std::vector<Shape> leaf_shapes(const Problem& p) const {
    if (p.packed) return {{p.B, p.Tq, 3 * p.H * p.D}};
    if (p.strided) return {{p.B, p.Tq, 3, p.H, p.D}};
    return {{p.B, p.H, p.Tq, p.D}, {p.B, p.H, p.Tk, p.D}, {p.B, p.H, p.Tk, p.Dv}};
  }

  static Variable attention(const Problem& p, const Vars& leaves) {
    if (p.packed) return scaled_dot_product_attention_packed(leaves[0], p.H, p.causal);
    if (!p.strided) return scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], p.causal);
    Vars heads;
    for (const Variable& part : chunk(leaves[0], 3, 2)) heads.push_back(permute(squeeze(part, 2), {0, 2, 1, 3}));
    return scaled_dot_product_attention(heads[0], heads[1], heads[2], p.causal);
  }

  void check(const Problem& p, DType t) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(name_of(p, t) + (accumulate ? " (accumulating gradients)" : " (fresh gradients)"));
      Vars vc, vg;
      std::vector<Tensor> prior;
      for (const Shape& s : leaf_shapes(p)) {
        const Tensor x = rand(s).to(t);
        vc.emplace_back(x.clone(), true);
        vg.emplace_back(on_gpu(x), true);
        if (accumulate) {
          const Tensor g0 = rand(s).to(t);
          vc.back().set_grad(g0.clone());
          vg.back().set_grad(on_gpu(g0));
          prior.push_back(g0);
        }
      }
      const Variable yc = attention(p, vc), yg = attention(p, vg);
      ASSERT_EQ(yg.device(), gpu());
      ASSERT_EQ(yg.dtype(), t);
      close(yg.data(), yc.data(), t, "forward");
      const Tensor w = rand(yc.shape()).to(t);
      sum(mul(yc, Variable(w))).backward();
      if (!accumulate) {
        std::vector<Tensor> held;
        for (int copies = 0; copies < 3; ++copies)
          for (const Shape& s : leaf_shapes(p)) held.push_back(poisoned(s).to(t));
      }
      sum(mul(yg, Variable(on_gpu(w)))).backward();
      for (std::size_t i = 0; i < vc.size(); ++i) {
        ASSERT_TRUE(vg[i].grad().defined()) << "input " << i << " got no gradient on the GPU";
        close(vg[i].grad(), vc[i].grad(), t, "grad of input " + std::to_string(i),
              accumulate ? prior[i] : Tensor());
      }
    }
  }
};

// GPT-2's head dimension and the next cuDNN serves; sequences that end inside a tile of keys.
TEST_F(AttentionTest, AgreesWithTheCpu) {
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (bool strided : {false, true}) check({2, 3, 100, 100, d, d, causal, strided}, t);
}

// The packed form, whose gradients the kernels write through strided views of one buffer.
TEST_F(AttentionTest, PackedProjectionAgreesWithTheCpu) {
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true}) check({2, 3, 100, 100, d, d, causal, false, true}, t);
}

// Causal with more queries than keys (the last rows see every key) and fewer (each row stops at
// its own position: top-left alignment, as PyTorch's is_causal).
TEST_F(AttentionTest, AgreesWithTheCpuWhenQueriesAndKeysDiffer) {
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (bool causal : {false, true}) {
      check({2, 2, 70, 37, 64, 64, causal, false}, t);
      check({1, 3, 37, 70, 64, 64, causal, false}, t);
    }
}

// Head dimensions cuDNN is not offered (not a multiple of 8) run on dpl's kernels in every dtype;
// a value narrower than the keys; the widest register layouts (D up to 256, then up to 1024).
TEST_F(AttentionTest, OtherHeadDimensionsAgree) {
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    check({2, 2, 33, 33, 20, 20, true, false}, t);
    check({1, 2, 9, 9, 3, 3, false, false}, t);
    check({1, 2, 40, 40, 64, 32, true, false}, t);
    check({1, 1, 50, 50, 160, 160, true, false}, t);
  }
  check({1, 1, 20, 20, 300, 300, false, false}, kFloat32);
  const backend::SdpaParams params{true, 0.2f, true};
  const Tensor q = rand({1, 2, 8, 20}).to(kBFloat16).to(gpu());
  EXPECT_FALSE(backend::sdpa_fused(params, q, q, q)) << "a head dimension of 20 is not offered to cuDNN";
}

// The same GPU tensors through cuDNN's fused kernels and through dpl's own: outputs, statistics
// and the three gradients, written and accumulated.
TEST_F(AttentionTest, CudnnAndPlainKernelsAgree) {
  int compared = 0;
  for (DType t : {kBFloat16, kFloat16})
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (bool strided : {false, true}) {
          const std::int64_t B = 2, H = 3, T = 130;
          SCOPED_TRACE(std::string(dtype_name(t)) + " D" + std::to_string(d) + (causal ? " causal" : "") +
                       (strided ? " strided" : ""));
          Tensor q, k, v;
          if (strided) {
            const Tensor qkv = rand({B, T, 3, H, d}).to(t).to(gpu());
            Tensor heads[3];
            for (std::int64_t i = 0; i < 3; ++i) {
              const Tensor part = qkv.narrow(2, i, 1);
              heads[i] = Tensor(part.storage(), part.offset(), {B, H, T, d},
                                {part.strides()[0], part.strides()[3], part.strides()[1], 1}, t);
            }
            q = heads[0], k = heads[1], v = heads[2];
          } else {
            q = rand({B, H, T, d}).to(t).to(gpu());
            k = rand({B, H, T, d}).to(t).to(gpu());
            v = rand({B, H, T, d}).to(t).to(gpu());
          }
          backend::SdpaParams fused{causal, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), true};
          backend::SdpaParams plain = fused;
          plain.allow_fused = false;
          if (!backend::sdpa_fused(fused, q, k, v)) continue;
          EXPECT_FALSE(backend::sdpa_fused(plain, q, k, v));
          ++compared;
          const TensorOptions o(t, gpu()), f32(kFloat32, gpu());
          Tensor out_f = Tensor::empty({B, H, T, d}, o), out_p = Tensor::empty({B, H, T, d}, o);
          Tensor lse_f = Tensor::empty({B, H, T}, f32), lse_p = Tensor::empty({B, H, T}, f32);
          backend::sdpa_forward(fused, q, k, v, out_f, lse_f);
          backend::sdpa_forward(plain, q, k, v, out_p, lse_p);
          close(out_f, out_p.to(Device::cpu()), t, "forward");
          expect_close(lse_f.to(Device::cpu()), lse_p.to(Device::cpu()), 1e-3f, 1e-3f, "statistics");
          const Tensor gout = rand({B, H, T, d}).to(t).to(gpu());
          for (float beta : {0.f, 1.f}) {
            SCOPED_TRACE(beta == 0.f ? "gradients written" : "gradients accumulated");
            const Tensor prior = rand({B, H, T, d}).to(t);
            Tensor gf[3], gp[3];
            for (int i = 0; i < 3; ++i) {
              gf[i] = beta == 0.f ? poisoned({B, H, T, d}).to(t) : prior.to(gpu());
              gp[i] = beta == 0.f ? poisoned({B, H, T, d}).to(t) : prior.to(gpu());
            }
            backend::sdpa_backward(fused, q, k, v, out_p, gout, lse_p, beta, gf[0], gf[1], gf[2]);
            backend::sdpa_backward(plain, q, k, v, out_p, gout, lse_p, beta, gp[0], gp[1], gp[2]);
            for (int i = 0; i < 3; ++i)
              close(gf[i], gp[i].to(Device::cpu()), t, "gradient " + std::to_string(i),
                    beta == 0.f ? Tensor() : prior);
          }
        }
  if (compared == 0)
    GTEST_SKIP() << "no problem ran on cuDNN's fused kernels: a build without cuDNN's frontend "
                    "(scripts/fetch_cudnn_frontend.sh), DPL_ATTENTION=plain, or cuDNN refused them all";
}

TEST_F(AttentionTest, RefusesOperandsOnTwoDevices) {
  const Variable q(rand({1, 2, 4, 8}).to(gpu())), k(rand({1, 2, 4, 8})), v(rand({1, 2, 4, 8}).to(gpu()));
  try {
    scaled_dot_product_attention(q, k, v);
    ADD_FAILURE() << "no dpl::Error for operands on two devices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scaled_dot_product_attention: expected operands on one device, got cuda:0 "
                                         "for a query and cpu for a key"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dpl::test
