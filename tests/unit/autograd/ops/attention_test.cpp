// scaled_dot_product_attention on the CPU: finite differences of all three gradients (causal and
// not, Tq == Tk and Tq != Tk, a wider value, strided views of one projection), PyTorch's values
// (tests/golden/attention_golden.txt, written by tests/golden/make_attention_golden.py) including
// the per-row statistics the kernels keep, the same attention composed of matmul, masked_fill and
// softmax, 16-bit inputs, and the errors for bad inputs.
// Golden tolerance 1e-5: the inputs are exact, what remains is float32 arithmetic (a softmax and
// sums over a few rows).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;
using test::gradcheck;
using Vars = std::vector<Variable>;

constexpr float kGoldenTol = 1e-5f;

Tensor randn(const Shape& shape, Generator& gen) { return Tensor::normal(shape, 0.f, 1.f, gen); }

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = test::load_golden("attention_golden.txt");
  return cases;
}

// q, k, v of a (B, T, 3, H, D) projection (one tensor, as a linear layer gives them), each split
// off and permuted to (B, H, T, D) without a copy: strided views whose last stride is 1.
Vars heads_of_projection(const Variable& qkv) {
  std::vector<Variable> parts = chunk(qkv, 3, 2);
  Vars out;
  for (const Variable& p : parts) out.push_back(permute(squeeze(p, 2), {0, 2, 1, 3}));
  return out;
}

// The attention composed of other ops: softmax(scale q k^T, masked above the diagonal when
// causal) v, as PyTorch's documentation defines it.
Variable composed(const Variable& q, const Variable& k, const Variable& v, bool causal, double scale) {
  Variable s = affine(matmul(q, transpose(k, -2, -1)), static_cast<float>(scale), 0.f);
  if (causal) {
    const std::int64_t tq = q.shape()[2], tk = k.shape()[2];
    Tensor mask = Tensor::empty({tq, tk}, kUInt8);
    for (std::int64_t i = 0; i < tq; ++i)
      for (std::int64_t j = 0; j < tk; ++j) mask.data<std::uint8_t>()[i * tk + j] = j > i ? 1 : 0;
    s = masked_fill(s, mask, -INFINITY);
  }
  return matmul(softmax(s), v);
}

// --- gradients --------------------------------------------------------------------------------

TEST(ScaledDotProductAttention, Gradcheck) {
  Generator gen(1);
  const auto sdpa = [](bool causal) {
    return [causal](const Vars& v) { return scaled_dot_product_attention(v[0], v[1], v[2], causal); };
  };
  // q, k, v of the given (B, H, Tq, D), (B, H, Tk, D), (B, H, Tk, Dv) shapes.
  const auto inputs = [&](const Shape& q, const Shape& k, const Shape& v) {
    return std::vector<Tensor>{randn(q, gen), randn(k, gen), randn(v, gen)};
  };
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    EXPECT_TRUE(gradcheck(sdpa(causal), inputs({2, 2, 4, 3}, {2, 2, 4, 3}, {2, 2, 4, 3})));
    // More queries than keys, and fewer, with a value wider and narrower than the keys.
    EXPECT_TRUE(gradcheck(sdpa(causal), inputs({1, 2, 5, 3}, {1, 2, 3, 3}, {1, 2, 3, 4})));
    EXPECT_TRUE(gradcheck(sdpa(causal), inputs({2, 1, 3, 4}, {2, 1, 6, 4}, {2, 1, 6, 2})));
  }
  EXPECT_TRUE(gradcheck([](const Vars& v) { return scaled_dot_product_attention(v[0], v[1], v[2], true, 0.7); },
                        {randn({1, 1, 4, 2}, gen), randn({1, 1, 4, 2}, gen), randn({1, 1, 4, 2}, gen)}));
}

TEST(ScaledDotProductAttention, GradcheckThroughStridedViewsOfOneProjection) {
  Generator gen(2);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    EXPECT_TRUE(gradcheck(
        [causal](const Vars& v) {
          const Vars qkv = heads_of_projection(v[0]);
          return scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], causal);
        },
        {randn({2, 4, 3, 2, 3}, gen)}));
  }
}

TEST(ScaledDotProductAttention, StridedViewsAreReadInPlaceAndGiveTheValuesOfCopies) {
  Generator gen(3);
  const Variable qkv(randn({2, 5, 3, 3, 4}, gen), true);
  const Vars views = heads_of_projection(qkv);
  for (const Variable& view : views) {
    EXPECT_FALSE(view.data().is_contiguous());
    EXPECT_EQ(view.data().strides()[3], 1);
    EXPECT_TRUE(view.data().shares_storage_with(qkv.data()));
  }
  const Tensor gy = randn({2, 3, 5, 4}, gen);
  const Variable y = scaled_dot_product_attention(views[0], views[1], views[2], true);
  sum(mul(y, Variable(gy))).backward();
  const Vars dense = {Variable(views[0].data().contiguous(), true), Variable(views[1].data().contiguous(), true),
                      Variable(views[2].data().contiguous(), true)};
  const Variable yd = scaled_dot_product_attention(dense[0], dense[1], dense[2], true);
  sum(mul(yd, Variable(gy))).backward();
  EXPECT_EQ(y.data().to_vector<float>(), yd.data().to_vector<float>());
  // The projection's gradient holds the three heads' gradients in its own layout.
  const Vars grads = heads_of_projection(Variable(qkv.grad()));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(grads[static_cast<std::size_t>(i)].data().contiguous().to_vector<float>(),
              dense[static_cast<std::size_t>(i)].grad().to_vector<float>())
        << "input " << i;
}

TEST(ScaledDotProductAttention, OutputLiesTokensFirstSoMergingTheHeadsIsAView) {
  Generator gen(5);
  const std::int64_t B = 2, H = 3, T = 5, D = 4;
  const Variable q(randn({B, H, T, D}, gen), true), k(randn({B, H, T, D}, gen), true), v(randn({B, H, T, D}, gen), true);
  const Variable y = scaled_dot_product_attention(q, k, v, true);
  EXPECT_EQ(y.shape(), (Shape{B, H, T, D}));
  EXPECT_EQ(y.data().strides(), (Strides{T * H * D, D, H * D, 1}));
  const Variable merged = reshape(transpose(y, 1, 2), {B, T, H * D});
  EXPECT_TRUE(merged.data().shares_storage_with(y.data()));
  EXPECT_TRUE(merged.data().is_contiguous());
  // The merged rows' gradient reaches the inputs as a packed output's would.
  EXPECT_TRUE(gradcheck(
      [&](const Vars& x) {
        return reshape(transpose(scaled_dot_product_attention(x[0], x[1], x[2], true), 1, 2), {B, T, H * D});
      },
      {q.data(), k.data(), v.data()}));
}

// A last dimension that is not contiguous (a head transposed from (D, T)) is read through a copy,
// and its gradient goes back through the transpose.
TEST(ScaledDotProductAttention, ReadsATransposedHeadThroughACopy) {
  Generator gen(4);
  const Tensor q = randn({1, 2, 4, 3}, gen), k = randn({1, 2, 4, 3}, gen), vt = randn({1, 2, 3, 4}, gen);
  const Tensor gy = randn({1, 2, 4, 3}, gen);
  const Variable xt(vt.clone(), true), xd(vt.clone(), true);
  const Variable v_strided = transpose(xt, -2, -1);
  ASSERT_NE(v_strided.data().strides()[3], 1);
  const Variable v_dense = contiguous(transpose(xd, -2, -1));
  const Variable y = scaled_dot_product_attention(Variable(q), Variable(k), v_strided);
  const Variable yd = scaled_dot_product_attention(Variable(q), Variable(k), v_dense);
  EXPECT_EQ(y.data().to_vector<float>(), yd.data().to_vector<float>());
  sum(mul(y, Variable(gy))).backward();
  sum(mul(yd, Variable(gy))).backward();
  EXPECT_EQ(xt.grad().to_vector<float>(), xd.grad().to_vector<float>());
}

// --- PyTorch's values --------------------------------------------------------------------------

TEST(ScaledDotProductAttention, MatchesPyTorch) {
  ASSERT_EQ(golden_cases().size(), 5u) << "tests/golden/attention_golden.txt is missing or incomplete";
  for (const GoldenCase& c : golden_cases()) {
    SCOPED_TRACE(c.name);
    const bool causal = c.int_param("causal") != 0;
    const std::optional<double> scale =
        c.int_param("default_scale") != 0 ? std::nullopt : std::optional<double>(c.param("scale"));
    const Variable q(c.tensor("q").clone(), true), k(c.tensor("k").clone(), true), v(c.tensor("v").clone(), true);
    const Variable y = scaled_dot_product_attention(q, k, v, causal, scale);
    expect_golden(y.data(), c.tensor("y"), c.name + " y", kGoldenTol, kGoldenTol);
    sum(mul(y, Variable(c.tensor("gy")))).backward();
    expect_golden(q.grad(), c.tensor("gq"), c.name + " gq", kGoldenTol, kGoldenTol);
    expect_golden(k.grad(), c.tensor("gk"), c.name + " gk", kGoldenTol, kGoldenTol);
    expect_golden(v.grad(), c.tensor("gv"), c.name + " gv", kGoldenTol, kGoldenTol);
  }
}

// The statistics the forward kernel keeps for backward: each row's log-sum-exp of its scores.
TEST(ScaledDotProductAttention, KeepsEachRowsLogSumExp) {
  for (const GoldenCase& c : golden_cases()) {
    SCOPED_TRACE(c.name);
    backend::SdpaParams p;
    p.causal = c.int_param("causal") != 0;
    p.scale = static_cast<float>(c.param("scale"));
    const Tensor &q = c.tensor("q"), &k = c.tensor("k"), &v = c.tensor("v");
    Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)});
    Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)});
    backend::sdpa_forward(p, q, k, v, out, lse);
    expect_golden(out, c.tensor("y"), c.name + " out", kGoldenTol, kGoldenTol);
    expect_golden(lse, c.tensor("lse"), c.name + " lse", kGoldenTol, kGoldenTol);
    EXPECT_FALSE(backend::sdpa_fused(p, q, k, v)) << "the CPU has no fused kernels";
  }
}

TEST(ScaledDotProductAttention, EqualsTheAttentionComposedOfOtherOps) {
  Generator gen(5);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Tensor tq = randn({2, 3, 6, 5}, gen), tk = randn({2, 3, 4, 5}, gen), tv = randn({2, 3, 4, 7}, gen);
    const Tensor gy = randn({2, 3, 6, 7}, gen);
    const Vars a = {Variable(tq, true), Variable(tk, true), Variable(tv, true)};
    const Vars b = {Variable(tq.clone(), true), Variable(tk.clone(), true), Variable(tv.clone(), true)};
    const double scale = 1.0 / std::sqrt(5.0);
    const Variable ya = scaled_dot_product_attention(a[0], a[1], a[2], causal);
    const Variable yb = composed(b[0], b[1], b[2], causal, scale);
    expect_golden(ya.data(), yb.data(), "y", 1e-5f, 1e-5f);
    sum(mul(ya, Variable(gy))).backward();
    sum(mul(yb, Variable(gy))).backward();
    for (int i = 0; i < 3; ++i)
      expect_golden(a[static_cast<std::size_t>(i)].grad(), b[static_cast<std::size_t>(i)].grad(),
                    "gradient of input " + std::to_string(i), 1e-4f, 1e-5f);
  }
}

TEST(ScaledDotProductAttention, DefaultScaleIsOneOverTheSquareRootOfTheHeadDimension) {
  Generator gen(6);
  const Variable q(randn({1, 2, 3, 9}, gen)), k(randn({1, 2, 5, 9}, gen)), v(randn({1, 2, 5, 2}, gen));
  EXPECT_EQ(scaled_dot_product_attention(q, k, v).data().to_vector<float>(),
            scaled_dot_product_attention(q, k, v, false, 1.0 / 3.0).data().to_vector<float>());
}

// The first query of a causal attention sees only the first key: its output is that key's value.
TEST(ScaledDotProductAttention, CausalRowsSeeOnlyEarlierKeys) {
  Generator gen(7);
  const Variable q(randn({1, 1, 4, 3}, gen)), k(randn({1, 1, 4, 3}, gen)), v(randn({1, 1, 4, 2}, gen));
  const Tensor y = scaled_dot_product_attention(q, k, v, true).data();
  EXPECT_FLOAT_EQ(y.at<float>({0, 0, 0, 0}), v.data().at<float>({0, 0, 0, 0}));
  EXPECT_FLOAT_EQ(y.at<float>({0, 0, 0, 1}), v.data().at<float>({0, 0, 0, 1}));
  // Changing a later key leaves earlier rows alone.
  Tensor k2 = k.data().clone();
  k2.set<float>({0, 0, 3, 0}, 5.f);
  const Tensor y2 = scaled_dot_product_attention(q, Variable(k2), v, true).data();
  const std::vector<float> a = y.to_vector<float>(), b = y2.to_vector<float>();
  for (std::size_t e = 0; e < 6; ++e) EXPECT_EQ(a[e], b[e]) << "element " << e;
}

TEST(ScaledDotProductAttention, RecordsNothingWithoutGradients) {
  Generator gen(8);
  const Variable q(randn({1, 1, 3, 2}, gen)), k(randn({1, 1, 3, 2}, gen)), v(randn({1, 1, 3, 2}, gen));
  EXPECT_FALSE(scaled_dot_product_attention(q, k, v).requires_grad());
  const Variable qg(randn({1, 1, 3, 2}, gen), true);
  EXPECT_TRUE(scaled_dot_product_attention(qg, k, v).requires_grad());
  NoGradGuard no_grad;
  EXPECT_FALSE(scaled_dot_product_attention(qg, k, v).requires_grad());
}

// Only some inputs require a gradient: the others get none, the rest theirs.
TEST(ScaledDotProductAttention, GradientOfOneInputAlone) {
  Generator gen(9);
  const Tensor tq = randn({1, 2, 3, 4}, gen), tk = randn({1, 2, 5, 4}, gen), tv = randn({1, 2, 5, 3}, gen);
  const Tensor gy = randn({1, 2, 3, 3}, gen);
  const Vars all = {Variable(tq, true), Variable(tk, true), Variable(tv, true)};
  sum(mul(scaled_dot_product_attention(all[0], all[1], all[2], true), Variable(gy))).backward();
  for (int i = 0; i < 3; ++i) {
    Vars v = {Variable(tq.clone()), Variable(tk.clone()), Variable(tv.clone())};
    v[static_cast<std::size_t>(i)].set_requires_grad(true);
    sum(mul(scaled_dot_product_attention(v[0], v[1], v[2], true), Variable(gy))).backward();
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(v[static_cast<std::size_t>(j)].grad().defined(), i == j) << "input " << j;
    EXPECT_EQ(v[static_cast<std::size_t>(i)].grad().to_vector<float>(),
              all[static_cast<std::size_t>(i)].grad().to_vector<float>());
  }
}

// Self-attention of one tensor: q, k and v are the same variable and its gradient is the sum.
TEST(ScaledDotProductAttention, OneVariableAsQueryKeyAndValue) {
  Generator gen(10);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return scaled_dot_product_attention(v[0], v[0], v[0], true); },
                        {randn({1, 2, 4, 3}, gen)}));
}

TEST(ScaledDotProductAttention, SixteenBitInputs) {
  Generator gen(11);
  const Tensor tq = randn({2, 2, 9, 8}, gen), tk = randn({2, 2, 9, 8}, gen), tv = randn({2, 2, 9, 8}, gen);
  const Tensor gy = randn({2, 2, 9, 8}, gen);
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    // The reference: the same rounded inputs in float32.
    const Vars r = {Variable(tq.to(dt).to(kFloat32), true), Variable(tk.to(dt).to(kFloat32), true),
                    Variable(tv.to(dt).to(kFloat32), true)};
    const Vars h = {Variable(tq.to(dt), true), Variable(tk.to(dt), true), Variable(tv.to(dt), true)};
    const Variable yr = scaled_dot_product_attention(r[0], r[1], r[2], true);
    const Variable yh = scaled_dot_product_attention(h[0], h[1], h[2], true);
    EXPECT_EQ(yh.dtype(), dt);
    sum(mul(yr, Variable(gy.to(dt).to(kFloat32)))).backward();
    sum(mul(yh, Variable(gy.to(dt)))).backward();
    // Computed in float32 and rounded once: one 16-bit rounding of each result.
    const float tol = dt == kBFloat16 ? 1.f / 128 : 1.f / 1024;
    expect_golden(yh.data(), yr.data().to(dt).to(kFloat32), "y", tol, tol);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(h[static_cast<std::size_t>(i)].grad().dtype(), dt);
      expect_golden(h[static_cast<std::size_t>(i)].grad(), r[static_cast<std::size_t>(i)].grad(),
                    "gradient of input " + std::to_string(i), tol, tol);
    }
  }
}

// --- the packed form ---------------------------------------------------------------------------

// What the packed form must equal: the heads of the (B, T, 3 * H * D) projection as views, the
// attention, and the heads merged back into (B, T, H * D).
Variable unpacked(const Variable& qkv, std::int64_t heads, bool causal, std::optional<double> scale = std::nullopt) {
  const std::int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3;
  const Vars v = heads_of_projection(reshape(qkv, {B, T, 3, heads, C / heads}));
  return reshape(transpose(scaled_dot_product_attention(v[0], v[1], v[2], causal, scale), 1, 2), {B, T, C});
}

TEST(ScaledDotProductAttentionPacked, GradcheckOfTheProjection) {
  Generator gen(21);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    EXPECT_TRUE(gradcheck([causal](const Vars& v) { return scaled_dot_product_attention_packed(v[0], 2, causal); },
                          {randn({2, 4, 3 * 2 * 3}, gen)}));
  }
}

TEST(ScaledDotProductAttentionPacked, EqualsTheAttentionOfTheSplitHeadsMergedBack) {
  Generator gen(22);
  for (DType dt : {kFloat32, kBFloat16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (causal ? " causal" : ""));
      const Tensor x = randn({2, 5, 3 * 3 * 4}, gen).to(dt);
      const Tensor gy = randn({2, 5, 3 * 4}, gen).to(dt);
      const Variable packed_in(x, true), split_in(x.clone(), true);
      const Variable y = scaled_dot_product_attention_packed(packed_in, 3, causal, 0.3);
      const Variable ref = unpacked(split_in, 3, causal, 0.3);
      ASSERT_EQ(y.shape(), (Shape{2, 5, 12}));
      EXPECT_TRUE(y.data().is_contiguous());
      sum(mul(y, Variable(gy))).backward();
      sum(mul(ref, Variable(gy))).backward();
      // The same kernels on the same views: equal to the bit, in every dtype.
      EXPECT_EQ(y.data().to(kFloat32).to_vector<float>(), ref.data().contiguous().to(kFloat32).to_vector<float>());
      EXPECT_EQ(packed_in.grad().to(kFloat32).to_vector<float>(), split_in.grad().to(kFloat32).to_vector<float>());
    }
  }
}

TEST(ScaledDotProductAttentionPacked, AddsToAGradientTheProjectionAlreadyHas) {
  Generator gen(23);
  const Tensor x = randn({1, 4, 3 * 2 * 2}, gen);
  const Variable packed_in(x, true), split_in(x.clone(), true);
  // The projection is used twice: the other use's gradient is there before the attention's.
  sum(add(scaled_dot_product_attention_packed(packed_in, 2, true), narrow(mul(packed_in, packed_in), 2, 0, 4)))
      .backward();
  sum(add(unpacked(split_in, 2, true), narrow(mul(split_in, split_in), 2, 0, 4))).backward();
  expect_golden(packed_in.grad(), split_in.grad(), "gradient of the projection", 1e-6f, 1e-6f);
}

TEST(ScaledDotProductAttentionPacked, RefusesBadInputs) {
  DPL_EXPECT_ERROR(scaled_dot_product_attention_packed(Variable(Tensor::ones({4, 12})), 2),
                   HasSubstr("scaled_dot_product_attention_packed: expected a packed projection (B, T, 3 * H * D) "
                             "with 3 dimensions, got shape (4, 12)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention_packed(Variable(Tensor::ones({2, 4, 12})), 0),
                   HasSubstr("expected heads >= 1, got 0"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention_packed(Variable(Tensor::ones({2, 4, 12})), 3),
                   HasSubstr("a last dimension that 3 * heads = 9 divides, got shape (2, 4, 12)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention_packed(Variable(Tensor::ones({2, 0, 12})), 2),
                   HasSubstr("with T >= 1"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention_packed(Variable(Tensor::ones({2, 4, 12})), 2, false, NAN),
                   HasSubstr("expected a finite scale"));
}

// --- bad inputs --------------------------------------------------------------------------------

TEST(ScaledDotProductAttention, RefusesBadInputs) {
  const Variable q(Tensor::ones({2, 3, 4, 8})), k(Tensor::ones({2, 3, 5, 8})), v(Tensor::ones({2, 3, 5, 6}));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(Variable(Tensor::ones({3, 4, 8})), k, v),
                   HasSubstr("scaled_dot_product_attention: expected a query (B, H, Tq, D) with 4 dimensions, got "
                             "shape (3, 4, 8)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(Tensor::ones({2, 3, 5, 8, 1})), v),
                   HasSubstr("expected a key (B, H, Tk, D) with 4 dimensions"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, k, Variable(Tensor::ones({5, 6}))),
                   HasSubstr("expected a value (B, H, Tk, Dv) with 4 dimensions"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(Tensor::ones({2, 4, 5, 8})), v),
                   HasSubstr("expected a key with the query's batch and heads (2, 3), got shape (2, 4, 5, 8)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, k, Variable(Tensor::ones({1, 3, 5, 6}))),
                   HasSubstr("expected a value with the query's batch and heads (2, 3), got shape (1, 3, 5, 6)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(Tensor::ones({2, 3, 5, 7})), v),
                   HasSubstr("expected a key with the query's head dimension 8, got shape (2, 3, 5, 7)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, k, Variable(Tensor::ones({2, 3, 4, 6}))),
                   HasSubstr("expected a value with the key's 5 positions, got shape (2, 3, 4, 6)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(Tensor::ones({2, 3, 0, 8})),
                                                Variable(Tensor::ones({2, 3, 0, 6}))),
                   HasSubstr("expected a key with at least one position (Tk >= 1)"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, false, INFINITY), HasSubstr("expected a finite scale"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(Tensor::ones({2, 3, 5, 8}, kBFloat16)), v),
                   HasSubstr("expected operands of one dtype, got float32 for a query and bfloat16 for a key"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(Variable(Tensor::ones({2, 3, 4, 8}, kInt64)), k, v),
                   HasSubstr("expected a query (B, H, Tq, D) of dtype float32, bfloat16 or float16, got int64"));
  DPL_EXPECT_ERROR(scaled_dot_product_attention(q, Variable(), v),
                   HasSubstr("expected a key (B, H, Tk, D), got an undefined Variable"));
}

}  // namespace
}  // namespace dpl
