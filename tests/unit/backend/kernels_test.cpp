// The CPU kernels (src/backend/kernels.hpp) in bfloat16 and float16 against float32, N-D shapes,
// the casts, and the dispatcher's checks.
//
// The 16-bit inputs are float32 values rounded to the 16-bit type, and the float32 reference
// runs on the same (widened) values, so a 16-bit result may differ from the reference only by
// the final rounding: at most half an ulp of the 16-bit type, 2^-8 relative for bfloat16 (8
// significant bits) and 2^-11 for float16 (11 bits). The tolerances allow one ulp (2^-7,
// 2^-10) and a small absolute term for results near zero, where cancellation leaves no relative
// precision to speak of.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "core/half.hpp"
#include "dpl/config.hpp"
#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using backend::BinaryOp;
using backend::Broadcast;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

constexpr DType kHalfTypes[] = {kBFloat16, kFloat16};

/// One ulp of dtype relative to the value (the spacing at 1).
float rtol_of(DType t) { return t == kBFloat16 ? 1.f / 128.f : 1.f / 1024.f; }

/// Uniform values in [lo, hi) rounded to dtype (float32 tensor holding 16-bit-exact values).
Tensor exact_in(DType t, const Shape& s, Generator& gen, float lo = -1.f, float hi = 1.f) {
  return Tensor::uniform(s, lo, hi, gen).to(t).to(kFloat32);
}

/// Expects got (16-bit) within one 16-bit ulp (plus atol) of want (float32).
void expect_rounded(const Tensor& got, const Tensor& want, float atol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to(kFloat32).to_vector<float>(), w = want.to_vector<float>();
  const float rtol = rtol_of(got.dtype());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]))) {
      ADD_FAILURE() << what << " (" << got.dtype() << "): element " << i << " is " << g[i] << ", float32 gives "
                    << w[i];
      return;
    }
  }
}

class HalfKernels : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  /// The same values as a 16-bit tensor.
  Tensor half(const Tensor& exact) const { return exact.to(dt()); }
  Generator gen_{20240611};
};

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfKernels, ::testing::ValuesIn(kHalfTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(HalfKernels, Gemm) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.f, 1.f}) {
        const std::int64_t m = 7, k = 33, n = 5;
        const Tensor a = exact_in(dt(), ta ? Shape{k, m} : Shape{m, k}, gen_);
        const Tensor b = exact_in(dt(), tb ? Shape{n, k} : Shape{k, n}, gen_);
        const Tensor c0 = exact_in(dt(), {m, n}, gen_);
        Tensor want = c0.clone();
        backend::gemm(ta, tb, 0.5f, a, b, beta, want);
        Tensor got = half(c0);
        backend::gemm(ta, tb, 0.5f, half(a), half(b), beta, got);
        expect_rounded(got, want, 1e-6f, "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      }
    }
  }
}

TEST_P(HalfKernels, GemmIntoFloat32IsNotRoundedTo16Bits) {
  // 16-bit operands, a float32 output: the float32 product of the same values, added with beta 1
  // onto a value no 16-bit type holds (1 + 2^-20) and kept so.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::int64_t m = 7, k = 33, n = 5;
      const Tensor a = exact_in(dt(), ta ? Shape{k, m} : Shape{m, k}, gen_);
      const Tensor b = exact_in(dt(), tb ? Shape{n, k} : Shape{k, n}, gen_);
      for (float beta : {0.f, 1.f}) {
        const Tensor c0 = Tensor::full({m, n}, 1.0 + std::ldexp(1.0, -20));
        Tensor want = c0.clone(), got = c0.clone();
        backend::gemm(ta, tb, 0.5f, a, b, beta, want);
        backend::gemm(ta, tb, 0.5f, half(a), half(b), beta, got);
        EXPECT_EQ(got.dtype(), kFloat32);
        EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>())
            << "ta=" << ta << " tb=" << tb << " beta=" << beta;
      }
    }
  }
}

TEST_P(HalfKernels, ScaleByMixesDtypesAndRoundsOnce) {
  // x, s and out each of their own dtype: the float32 result of the same values, rounded once to
  // out's dtype (so a float32 x that no 16-bit type holds lands rounded once, not twice).
  const Tensor x = Tensor::uniform({37}, -1.f, 1.f, gen_), s = exact_in(dt(), {}, gen_, 0.5f, 2.f);
  for (float beta : {0.f, 1.f}) {
    const Tensor out0 = exact_in(dt(), {37}, gen_);
    Tensor want = out0.clone();
    backend::scale_by(x, s, beta, want);
    Tensor got = half(out0);
    backend::scale_by(x, half(s), beta, got);
    EXPECT_EQ(got.to(kFloat32).to_vector<float>(), want.to(dt()).to(kFloat32).to_vector<float>()) << beta;
    Tensor wide = out0.clone();  // 16-bit x and s into a float32 out: float32's result itself
    const Tensor xh = x.to(dt());
    Tensor want_wide = out0.clone();
    backend::scale_by(xh.to(kFloat32), s, beta, want_wide);
    backend::scale_by(xh, half(s), beta, wide);
    EXPECT_EQ(wide.to_vector<float>(), want_wide.to_vector<float>()) << beta;
  }
  Tensor in_place = x.to(dt());  // out may be x
  const Tensor before = in_place.to(kFloat32);
  backend::scale_by(in_place, half(s), 0.f, in_place);
  Tensor want = before.clone();
  backend::scale_by(before, s, 0.f, want);
  EXPECT_EQ(in_place.to(kFloat32).to_vector<float>(), want.to(dt()).to(kFloat32).to_vector<float>());
}

TEST_P(HalfKernels, BinaryNdWithEveryBroadcast) {
  const Shape s{2, 3, 8};
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
    for (Broadcast bc : {Broadcast::kNone, Broadcast::kRow, Broadcast::kScalar}) {
      for (float beta : {0.f, 1.f}) {
        const Shape bs = bc == Broadcast::kNone ? s : bc == Broadcast::kRow ? Shape{8} : Shape{};
        const Tensor a = exact_in(dt(), s, gen_), b = exact_in(dt(), bs, gen_), o0 = exact_in(dt(), s, gen_);
        Tensor want = o0.clone();
        backend::binary(op, bc, a, b, beta, want);
        Tensor got = half(o0);
        backend::binary(op, bc, half(a), half(b), beta, got);
        expect_rounded(got, want, 1e-6f, "binary op=" + std::to_string(static_cast<int>(op)) +
                                             " bc=" + std::to_string(static_cast<int>(bc)));
      }
    }
  }
  // In place, as linear adds its bias.
  const Tensor a = exact_in(dt(), s, gen_), b = exact_in(dt(), {8}, gen_);
  Tensor want = a.clone();
  backend::binary(BinaryOp::kAdd, Broadcast::kRow, want, b, 0.f, want);
  Tensor got = half(a);
  backend::binary(BinaryOp::kAdd, Broadcast::kRow, got, half(b), 0.f, got);
  expect_rounded(got, want, 1e-6f, "binary in place");
}

// pow_backward is gy times each partial derivative, in one pass; in 16 bits the optional outputs
// are widened and rounded back like any other output.
TEST_P(HalfKernels, PowBackwardIsGyTimesEachPartial) {
  const Shape s{3, 5, 7};
  for (float beta : {0.f, 1.f}) {
    for (int wanted : {1, 2, 3}) {  // bit 0: the base's gradient, bit 1: the exponent's
      const Tensor a = exact_in(dt(), s, gen_, 0.25f, 2.f), b = exact_in(dt(), s, gen_, -1.5f, 1.5f);
      const Tensor g = exact_in(dt(), s, gen_), ga0 = exact_in(dt(), s, gen_), gb0 = exact_in(dt(), s, gen_);
      Tensor want_a = ga0.clone(), want_b = gb0.clone(), d = Tensor::empty(s, kFloat32);
      backend::binary(BinaryOp::kPowGradBase, Broadcast::kNone, a, b, 0.f, d);
      backend::binary(BinaryOp::kMul, Broadcast::kNone, d, g, beta, want_a);
      backend::binary(BinaryOp::kPowGradExponent, Broadcast::kNone, a, b, 0.f, d);
      backend::binary(BinaryOp::kMul, Broadcast::kNone, d, g, beta, want_b);
      Tensor got_a = half(ga0), got_b = half(gb0);
      backend::pow_backward(half(a), half(b), half(g), beta, (wanted & 1) != 0 ? &got_a : nullptr, beta,
                            (wanted & 2) != 0 ? &got_b : nullptr);
      const std::string what = "pow_backward beta=" + std::to_string(beta) + " wanted=" + std::to_string(wanted);
      expect_rounded(got_a, (wanted & 1) != 0 ? want_a : ga0, 1e-5f, what + " (base)");
      expect_rounded(got_b, (wanted & 2) != 0 ? want_b : gb0, 1e-5f, what + " (exponent)");
    }
  }
}

TEST_P(HalfKernels, MapsNd) {
  const Shape s{3, 2, 5, 4};
  const Tensor x = exact_in(dt(), s, gen_), y0 = exact_in(dt(), s, gen_), gy = exact_in(dt(), s, gen_);
  for (float beta : {0.f, 1.f}) {
    Tensor want = y0.clone(), got = half(y0);
    backend::axpby(0.75f, x, beta, want);
    backend::axpby(0.75f, half(x), beta, got);
    expect_rounded(got, want, 1e-6f, "axpby");

    const Tensor s1 = exact_in(dt(), {}, gen_);
    want = y0.clone();
    got = half(y0);
    backend::fill_scaled(0.5f, s1, beta, want);
    backend::fill_scaled(0.5f, half(s1), beta, got);
    expect_rounded(got, want, 1e-6f, "fill_scaled");

    Tensor r = Tensor::empty(s);
    backend::relu(x, r);
    want = y0.clone();
    got = half(y0);
    backend::relu_backward(r, gy, beta, want);
    backend::relu_backward(half(r), half(gy), beta, got);
    expect_rounded(got, want, 0.f, "relu_backward");
  }
  Tensor want = Tensor::empty(s), got = Tensor::empty(s, dt());
  backend::relu(x, want);
  backend::relu(half(x), got);
  expect_rounded(got, want, 0.f, "relu");  // exact: relu only selects
  EXPECT_EQ(got.to(kFloat32).to_vector<float>(), want.to_vector<float>());
}

TEST_P(HalfKernels, ReductionsAccumulateInFloat) {
  // 4096 values of 1 sum to 4096 only when the sum is not kept in 16 bits: bfloat16 stops
  // counting at 256 (256 + 1 rounds back to 256), float16 at 2048.
  const Tensor ones = Tensor::ones({16, 16, 16}, dt());
  Tensor total = Tensor::empty({}, dt());
  backend::sum_all(1.f, ones, total);
  EXPECT_EQ(total.item(), 4096.f);
  Tensor cols = Tensor::empty({16}, dt());
  backend::sum_rows(1.f, ones, 0.f, cols);  // over the first two dimensions of a 3-D tensor
  EXPECT_EQ(cols.to(kFloat32).to_vector<float>(), std::vector<float>(16, 256.f));

  const Tensor x = exact_in(dt(), {6, 7, 9}, gen_), o0 = exact_in(dt(), {9}, gen_);
  for (float beta : {0.f, 1.f}) {
    Tensor want = o0.clone(), got = half(o0);
    backend::sum_rows(0.5f, x, beta, want);
    backend::sum_rows(0.5f, half(x), beta, got);
    expect_rounded(got, want, 1e-5f, "sum_rows");
  }
  Tensor want = Tensor::empty({}), got = Tensor::empty({}, dt());
  backend::sum_all(0.25f, x, want);
  backend::sum_all(0.25f, half(x), got);
  expect_rounded(got, want, 1e-5f, "sum_all");
}

TEST_P(HalfKernels, SoftmaxCrossEntropyAndAccuracy) {
  const std::int64_t rows = 9, classes = 11;
  const Tensor logits = exact_in(dt(), {rows, classes}, gen_, -4.f, 4.f);
  std::vector<std::int32_t> lv(rows);
  for (auto& v : lv) v = static_cast<std::int32_t>(gen_.below(classes));
  const Tensor labels = Tensor::from_vector(lv, {rows});

  Tensor wlse = Tensor::empty({rows}), wl = Tensor::empty({});
  backend::softmax_xent(logits, labels, 0.f, wlse, wl);
  Tensor glse = Tensor::empty({rows}), gl = Tensor::empty({}, dt());
  backend::softmax_xent(half(logits), labels, 0.f, glse, gl);
  EXPECT_EQ(glse.to_vector<float>(), wlse.to_vector<float>()) << "the log-sum-exp is float32 either way";
  expect_rounded(gl, wl, 1e-6f, "softmax_xent loss");
  Tensor unrounded = Tensor::empty({});  // a float32 loss beside 16-bit logits: float32's mean itself
  backend::softmax_xent(half(logits), labels, 0.f, glse, unrounded);
  EXPECT_EQ(unrounded.item(), wl.item());

  const Tensor gloss = exact_in(dt(), {}, gen_, 0.5f, 2.f), g0 = exact_in(dt(), {rows, classes}, gen_);
  for (float beta : {0.f, 1.f}) {
    Tensor want = g0.clone(), got = half(g0);
    backend::softmax_xent_backward(logits, labels, wlse, 0.f, gloss, beta, want);
    backend::softmax_xent_backward(half(logits), labels, wlse, 0.f, half(gloss), beta, got);
    expect_rounded(got, want, 1e-6f, "softmax_xent_backward");
  }
  // A float32 gloss beside 16-bit logits: a scale no 16-bit type holds (2^15 times the rows, which
  // leaves the gradient times 2^15), rounded once into the 16-bit gradient.
  const Tensor big = Tensor::full({}, 32768.0 * rows);
  Tensor want_big = Tensor::empty({rows, classes}), got_big = Tensor::empty({rows, classes}, dt());
  backend::softmax_xent_backward(logits, labels, wlse, 0.f, big, 0.f, want_big);
  backend::softmax_xent_backward(half(logits), labels, wlse, 0.f, big, 0.f, got_big);
  EXPECT_EQ(got_big.to(kFloat32).to_vector<float>(), want_big.to(dt()).to(kFloat32).to_vector<float>());
  // In place: the gradient written over the logits it is computed from.
  Tensor in_place = half(logits), want = Tensor::empty({rows, classes});
  backend::softmax_xent_backward(logits, labels, wlse, 0.f, gloss, 0.f, want);
  backend::softmax_xent_backward(in_place, labels, wlse, 0.f, half(gloss), 0.f, in_place);
  expect_rounded(in_place, want, 1e-6f, "softmax_xent_backward in place");

  // The loss and the gradient in one call: the two kernels' results, each rounded as theirs.
  for (float smoothing : {0.f, 0.2f}) {
    Tensor two = half(logits), two_lse = Tensor::empty({rows}), two_loss = Tensor::empty({});
    backend::softmax_xent(two, labels, smoothing, two_lse, two_loss);
    backend::softmax_xent_backward(two, labels, two_lse, smoothing, big, 0.f, two);
    Tensor one = half(logits), one_lse = Tensor::empty({rows}), one_loss = Tensor::empty({});
    backend::softmax_xent_and_grad(one, labels, smoothing, big, one_lse, one_loss);
    EXPECT_EQ(one_lse.to_vector<float>(), two_lse.to_vector<float>());
    EXPECT_EQ(one_loss.item(), two_loss.item());
    EXPECT_EQ(one.to(kFloat32).to_vector<float>(), two.to(kFloat32).to_vector<float>());
  }

  Tensor wa = Tensor::empty({}), ga = Tensor::empty({}, dt());
  backend::accuracy(logits, labels, wa);
  backend::accuracy(half(logits), labels, ga);
  expect_rounded(ga, wa, 0.f, "accuracy");
}

// --- casts --------------------------------------------------------------------------------------

TEST(Casts, RoundToNearestEven) {
  // Half-way cases go to the neighbour with an even last bit; just above half-way rounds up.
  struct Case {
    float value;
    std::uint16_t bf16, f16;
  };
  const Case cases[] = {
      {1.f, 0x3F80, 0x3C00},
      {1.f + 1.f / 256.f, 0x3F80, 0x3C04},            // bf16: half-way 1 / 1+2^-7 -> 1 (even)
      {1.f + 3.f / 256.f, 0x3F82, 0x3C0C},            // bf16: half-way, rounds up to the even one
      {1.f + 1.f / 2048.f, 0x3F80, 0x3C00},           // f16: half-way 1 / 1+2^-10 -> 1 (even)
      {1.f + 3.f / 2048.f, 0x3F80, 0x3C02},           // f16: half-way, rounds up to the even one
      {-2.5f, 0xC020, 0xC100},
      {65504.f, 0x4780, 0x7BFF},                      // the largest float16
      {70000.f, 0x4789, 0x7C00},                      // beyond float16's range: infinity
      {std::numeric_limits<float>::infinity(), 0x7F80, 0x7C00},
      {5.9604645e-08f, 0x3380, 0x0001},               // the smallest float16 subnormal
  };
  for (const Case& c : cases) {
    EXPECT_EQ(detail::float_to_bfloat16(c.value), c.bf16) << c.value;
    EXPECT_EQ(detail::float_to_float16(c.value), c.f16) << c.value;
    const Tensor t = Tensor::full({3}, c.value);
    const Tensor b = t.to(kBFloat16), h = t.to(kFloat16);
    EXPECT_EQ(static_cast<const std::uint16_t*>(b.raw_data())[2], c.bf16) << c.value;
    EXPECT_EQ(static_cast<const std::uint16_t*>(h.raw_data())[2], c.f16) << c.value;
  }
}

TEST(Casts, RoundTripsAndNaN) {
  Generator gen(7);
  const Tensor x = Tensor::uniform({2, 3, 50}, -100.f, 100.f, gen);
  for (DType t : kHalfTypes) {
    // A value that is exact in the 16-bit type survives every round trip unchanged.
    const Tensor exact = x.to(t).to(kFloat32);
    EXPECT_EQ(exact.to(t).to(kFloat32).to_vector<float>(), exact.to_vector<float>()) << dtype_name(t);
    // Rounding moves a value by at most half an ulp.
    const std::vector<float> a = x.to_vector<float>(), b = exact.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(a[i] - b[i]), rtol_of(t) / 2 * std::fabs(a[i]));
    // NaN stays NaN, in every direction.
    const Tensor nan = Tensor::full({4}, std::nan(""));
    for (float v : nan.to(t).to(kFloat32).to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << dtype_name(t);
  }
  // Between the two 16-bit types directly: 1 + 2^-7 is exact in both.
  const Tensor b = Tensor::full({2}, 1.f + 1.f / 128.f).to(kBFloat16);
  EXPECT_EQ(b.to(kFloat16).to(kFloat32).to_vector<float>(), std::vector<float>(2, 1.f + 1.f / 128.f));
  EXPECT_TRUE(std::isnan(Tensor::full({1}, std::nan("")).to(kFloat16).to(kBFloat16).item()));
  // The cast kernel itself, and copy_ converting on the way.
  Tensor h = Tensor::empty({2, 3, 50}, kFloat16);
  backend::cast(x, h);
  EXPECT_EQ(h.to(kFloat32).to_vector<float>(), x.to(kFloat16).to(kFloat32).to_vector<float>());
  Tensor back = Tensor::empty({2, 3, 50});
  back.copy_(h);
  EXPECT_EQ(back.to_vector<float>(), h.to(kFloat32).to_vector<float>());
}

TEST(Casts, FillAndItemIn16Bit) {
  Tensor b = Tensor::full({2, 2, 2}, 1.5, kBFloat16);
  EXPECT_EQ(static_cast<const std::uint16_t*>(b.raw_data())[7], 0x3FC0);
  Tensor h = Tensor::full({3}, -0.1, kFloat16);
  EXPECT_EQ(static_cast<const std::uint16_t*>(h.raw_data())[2], detail::float_to_float16(-0.1f));
  EXPECT_EQ(Tensor::full({}, 2.5, kFloat16).item(), 2.5f);
  Generator g1(5), g2(5);
  const Tensor u = Tensor::uniform({64}, -1.f, 1.f, g1, kBFloat16);
  EXPECT_EQ(u.dtype(), kBFloat16);
  const Tensor rounded = Tensor::uniform({64}, -1.f, 1.f, g2).to(kBFloat16);
  EXPECT_EQ(u.to(kFloat32).to_vector<float>(), rounded.to(kFloat32).to_vector<float>());
  DPL_EXPECT_ERROR(Tensor::zeros({2}, kInt32).to(kFloat16),
                   AllOf(HasSubstr("Tensor::to"), HasSubstr("int32"), HasSubstr("float16")));
}

// --- the dispatcher -----------------------------------------------------------------------------

TEST(Dispatch, ChecksDtypesAndNamesTheArguments) {
  const Tensor x = Tensor::zeros({4});
  Tensor y = Tensor::zeros({4}, kBFloat16);
  DPL_EXPECT_ERROR(backend::relu(x, y),
                   AllOf(HasSubstr("relu"), HasSubstr("y of dtype float32 like x"), HasSubstr("bfloat16")));
  Tensor yi = Tensor::zeros({4}, kInt32);
  DPL_EXPECT_ERROR(backend::relu(Tensor::zeros({4}, kInt32), yi),
                   AllOf(HasSubstr("relu"), HasSubstr("x of dtype float32, bfloat16 or float16"), HasSubstr("int32")));
  Tensor lse = Tensor::empty({2}), loss = Tensor::empty({});
  DPL_EXPECT_ERROR(backend::softmax_xent(Tensor::zeros({2, 3}), Tensor::zeros({2}, kInt64), 0.f, lse, loss),
                   AllOf(HasSubstr("softmax_xent"), HasSubstr("labels of dtype int32"), HasSubstr("int64")));
  // gemm's output may be float32 beside 16-bit operands, not another 16-bit type, and not 16-bit
  // beside float32 ones.
  Tensor c16 = Tensor::zeros({2, 2}, kFloat16), c_bf16 = Tensor::zeros({2, 2}, kBFloat16);
  DPL_EXPECT_ERROR(backend::gemm(false, false, 1.f, Tensor::zeros({2, 2}, kBFloat16), Tensor::zeros({2, 2}, kBFloat16),
                                 0.f, c16),
                   AllOf(HasSubstr("gemm"), HasSubstr("c of dtype bfloat16 like a"), HasSubstr("float16")));
  DPL_EXPECT_ERROR(backend::gemm(false, false, 1.f, Tensor::zeros({2, 2}), Tensor::zeros({2, 2}), 0.f, c_bf16),
                   AllOf(HasSubstr("gemm"), HasSubstr("c of dtype float32 like a"), HasSubstr("bfloat16")));
  Tensor p = Tensor::zeros({4}, kBFloat16);
  const backend::SgdHyper h{0.1f, 0.f};
  DPL_EXPECT_ERROR(backend::sgd_update(p, Tensor::zeros({4}, kBFloat16), h, {}),
                   AllOf(HasSubstr("sgd_update"), HasSubstr("param of dtype float32"), HasSubstr("bfloat16")));
  Tensor undefined;
  DPL_EXPECT_ERROR(backend::relu(x, undefined), AllOf(HasSubstr("relu"), HasSubstr("y is undefined")));
}

TEST(Dispatch, ACudaDeviceWithoutTheBackendSaysSo) {
  if (cuda_is_available()) GTEST_SKIP() << "this build has a usable GPU";
  const std::string msg = test::error_message([] { backend::synchronize(Device::cuda(0)); });
  EXPECT_THAT(msg, HasSubstr("cuda:0"));
  if (!DPL_WITH_CUDA) {
    EXPECT_THAT(msg, AllOf(HasSubstr("synchronize"), HasSubstr("has no CUDA backend")));
  }
}

// --- where errors come from ---------------------------------------------------------------------

TEST(ErrorLocation, WhereNamesTheCheckButWhatDoesNot) {
  try {
    (void)add(Variable(Tensor::zeros({2, 3})), Variable(Tensor::zeros({4})));
    ADD_FAILURE() << "add accepted mismatched shapes";
  } catch (const Error& e) {
    EXPECT_THAT(e.where(), MatchesRegex("src/autograd/ops/elementwise\\.cpp:[0-9]+"));
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("add"), Not(HasSubstr(".cpp")), Not(HasSubstr("src/"))));
  }
  EXPECT_EQ(Error("made by hand").where(), "");
}

// --- ops on N-D and 16-bit inputs ------------------------------------------------------------------

TEST(HalfOps, NdOpsForwardAndBackwardAgreeWithFloat32) {
  Generator gen(3);
  for (DType t : kHalfTypes) {
    const Tensor a = exact_in(t, {2, 3, 4}, gen), b = exact_in(t, {4}, gen);
    Variable a32(a, true), b32(b, true), a16(a.to(t), true), b16(b.to(t), true);
    Variable l32 = mean(relu(mul(add(a32, b32), a32)));
    Variable l16 = mean(relu(mul(add(a16, b16), a16)));
    EXPECT_EQ(l16.data().dtype(), t);
    l32.backward();
    l16.backward();
    EXPECT_NEAR(l16.data().item(), l32.data().item(), 4 * rtol_of(t) * std::fabs(l32.data().item()) + 1e-4f);
    // Several roundings in a row: a few ulps.
    const std::vector<float> g16 = a16.grad().to(kFloat32).to_vector<float>(), g32 = a32.grad().to_vector<float>();
    for (std::size_t i = 0; i < g16.size(); ++i) EXPECT_NEAR(g16[i], g32[i], 4 * rtol_of(t) * std::fabs(g32[i]) + 1e-4f);
  }
  DPL_EXPECT_ERROR(add(Variable(Tensor::zeros({2}, kBFloat16)), Variable(Tensor::zeros({2}))),
                   AllOf(HasSubstr("add"), HasSubstr("one dtype"), HasSubstr("bfloat16"), HasSubstr("float32")));
}

// --- activations, dropout, softmax, argmax, mean squared error ------------------------------------

TEST(Kernels, ReluPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor x = Tensor::from_vector<float>({nan, -nan, -1.f, 0.5f}, {4}).to(t);
    Tensor y = Tensor::empty({4}, t);
    backend::relu(x, y);
    const std::vector<float> v = y.to(kFloat32).to_vector<float>();
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1])) << t;
    EXPECT_EQ(v[2], 0.f) << t;
    EXPECT_EQ(v[3], 0.5f) << t;
  }
}

TEST_P(HalfKernels, ActivationsNd) {
  using backend::Activation;
  const Shape s{3, 2, 5, 4};
  const Tensor x = exact_in(dt(), s, gen_, -3.f, 3.f), g0 = exact_in(dt(), s, gen_), gy = exact_in(dt(), s, gen_);
  for (Activation f :
       {Activation::kLeakyRelu, Activation::kSigmoid, Activation::kTanh, Activation::kGelu, Activation::kGeluTanh}) {
    const std::string what = "activation " + std::to_string(static_cast<int>(f));
    Tensor want = Tensor::empty(s), got = Tensor::empty(s, dt());
    backend::activation(f, 0.125f, 0.f, x, want);
    backend::activation(f, 0.125f, 0.f, half(x), got);
    expect_rounded(got, want, 1e-6f, what);
    // The saved tensor as the op saves it: the 16-bit output, or the input.
    const Tensor saved = backend::backward_reads_output(f) ? got.to(kFloat32) : x;
    for (float beta : {0.f, 1.f}) {
      Tensor wg = g0.clone(), gg = half(g0);
      backend::activation_backward(f, 0.125f, 0.f, saved, gy, beta, wg);
      backend::activation_backward(f, 0.125f, 0.f, half(saved), half(gy), beta, gg);
      expect_rounded(gg, wg, 1e-6f, what + " backward");
    }
  }
}

TEST_P(HalfKernels, DropoutKeepsTheSameMaskInEveryDtype) {
  const Shape s{4, 3, 33};
  const Tensor x = exact_in(dt(), s, gen_), y0 = exact_in(dt(), s, gen_);
  for (float beta : {0.f, 1.f}) {
    Tensor want = y0.clone(), got = half(y0);
    backend::dropout(0.5f, 1234, x, beta, want);  // 1 / (1 - 0.5) = 2: exact in every dtype
    backend::dropout(0.5f, 1234, half(x), beta, got);
    expect_rounded(got, want, 0.f, "dropout");
  }
}

TEST_P(HalfKernels, SoftmaxArgmaxAndMseNd) {
  const Shape s{2, 3, 7};
  const Tensor x = exact_in(dt(), s, gen_, -4.f, 4.f), g0 = exact_in(dt(), s, gen_), gy = exact_in(dt(), s, gen_);
  for (bool log : {false, true}) {
    Tensor want = Tensor::empty(s), got = Tensor::empty(s, dt());
    backend::softmax(log, x, want);
    backend::softmax(log, half(x), got);
    expect_rounded(got, want, 1e-6f, log ? "log_softmax" : "softmax");
    const Tensor y = got.to(kFloat32);
    for (float beta : {0.f, 1.f}) {
      Tensor wg = g0.clone(), gg = half(g0);
      backend::softmax_backward(log, y, gy, beta, wg);
      backend::softmax_backward(log, half(y), half(gy), beta, gg);
      expect_rounded(gg, wg, 1e-5f, log ? "log_softmax backward" : "softmax backward");
    }
  }
  Tensor wa = Tensor::empty({2, 3}, kInt64), ga = Tensor::empty({2, 3}, kInt64);
  backend::argmax(x, wa);
  backend::argmax(half(x), ga);
  EXPECT_EQ(ga.to_vector<std::int64_t>(), wa.to_vector<std::int64_t>());

  const Tensor t = exact_in(dt(), s, gen_), gloss = exact_in(dt(), {}, gen_, 0.5f, 2.f);
  Tensor wl = Tensor::empty({}), gl = Tensor::empty({}, dt());
  backend::mse(x, t, wl);
  backend::mse(half(x), half(t), gl);
  expect_rounded(gl, wl, 1e-6f, "mse");
  for (float alpha : {1.f, -1.f}) {
    for (float beta : {0.f, 1.f}) {
      Tensor wg = g0.clone(), gg = half(g0);
      backend::mse_backward(x, t, gloss, alpha, beta, wg);
      backend::mse_backward(half(x), half(t), half(gloss), alpha, beta, gg);
      expect_rounded(gg, wg, 1e-6f, "mse_backward");
    }
  }
}

TEST_P(HalfKernels, SoftmaxCrossEntropyWithSmoothing) {
  const std::int64_t rows = 6, classes = 5;
  const Tensor logits = exact_in(dt(), {rows, classes}, gen_, -4.f, 4.f);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 4, 1, 1, 3, 2}, {rows});
  Tensor wlse = Tensor::empty({rows}), wl = Tensor::empty({});
  Tensor glse = Tensor::empty({rows}), gl = Tensor::empty({}, dt());
  backend::softmax_xent(logits, labels, 0.1f, wlse, wl);
  backend::softmax_xent(half(logits), labels, 0.1f, glse, gl);
  expect_rounded(gl, wl, 1e-6f, "smoothed softmax_xent loss");
  const Tensor gloss = exact_in(dt(), {}, gen_, 0.5f, 2.f);
  Tensor want = Tensor::empty({rows, classes}), got = Tensor::empty({rows, classes}, dt());
  backend::softmax_xent_backward(logits, labels, wlse, 0.1f, gloss, 0.f, want);
  backend::softmax_xent_backward(half(logits), labels, wlse, 0.1f, half(gloss), 0.f, got);
  expect_rounded(got, want, 1e-6f, "smoothed softmax_xent_backward");
}

}  // namespace
}  // namespace dpl
