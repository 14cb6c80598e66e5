#include "dpl/nn/attention.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/init.hpp"

namespace dpl::nn {
namespace {

// The block of rows [i * e, (i + 1) * e) of an in-projection parameter: query (0), key (1) or
// value (2). Undefined for an undefined parameter (no bias).
Variable block(const Variable& p, std::int64_t i, std::int64_t e) {
  return p.defined() ? narrow(p, 0, i * e, e) : Variable();
}

// A mask's description for errors: "uint8 (2, 5)".
std::string describe(const Tensor& t) { return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()); }

// scores with `mask` applied: where a uint8 mask is 1, -inf; a float mask added. mask broadcasts to
// scores' shape (the caller viewed it so).
Variable apply_mask(const Variable& scores, const Tensor& mask) {
  if (mask.dtype() == kUInt8) return masked_fill(scores, mask, -std::numeric_limits<float>::infinity());
  return add(scores, Variable(mask.dtype() == scores.dtype() ? mask : mask.to(scores.dtype())));
}

// Requires a mask that is uint8 or a float dtype, on `device`, of one of `shapes`; `what` names it.
void check_mask(const Tensor& mask, const Device& device, const std::vector<Shape>& shapes, const char* what) {
  DPL_CHECK(mask.dtype() == kUInt8 || is_float_dtype(mask.dtype()), "MultiheadAttention: expected ", what,
            " of uint8 (1 excludes a key) or a float dtype (added to the scores), got ", describe(mask));
  DPL_CHECK(mask.device() == device, "MultiheadAttention: expected ", what, " on ", device.str(), ", got it on ",
            mask.device().str());
  for (const Shape& s : shapes)
    if (mask.shape() == s) return;
  std::string expected;
  for (const Shape& s : shapes) expected += (expected.empty() ? "" : " or ") + shape_str(s);
  DPL_CHECK(false, "MultiheadAttention: expected ", what, " of shape ", expected, ", got ", describe(mask));
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options, Generator& gen)
    : options_(options), gen_(&gen) {
  const std::int64_t e = options.embed_dim(), h = options.num_heads();
  DPL_CHECK(e >= 1 && h >= 1, "MultiheadAttention: expected embed_dim >= 1 and num_heads >= 1, got ", e, " and ", h);
  DPL_CHECK(e % h == 0, "MultiheadAttention: expected num_heads to divide embed_dim, got embed_dim ", e, " and ", h,
            " heads");
  const float p = options.dropout();
  DPL_CHECK(p >= 0.f && p < 1.f, "MultiheadAttention: expected a dropout probability in [0, 1), got ", p);
  // PyTorch's order and initialisation: in_proj_weight, in_proj_bias, then out_proj.
  in_proj_weight_ = register_parameter("in_proj_weight", init::xavier_uniform_(Tensor::empty({3 * e, e}), 1.0, gen));
  if (options.bias()) in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * e}));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(LinearOptions(e, e).bias(options.bias()), gen));
  init::kaiming_uniform_(out_proj_->weight().data(), std::sqrt(5.0), init::FanMode::kFanIn, "leaky_relu", gen);
  if (options.bias()) init::zeros_(out_proj_->bias().data());
}

MultiheadAttention::MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, Generator& gen)
    : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads), gen) {}

const Tensor& MultiheadAttention::causal_mask(std::int64_t l, std::int64_t s, const Device& device) {
  if (causal_.defined() && causal_.shape() == Shape{l, s} && causal_.device() == device) return causal_;
  std::vector<std::uint8_t> later(static_cast<std::size_t>(l * s));
  for (std::int64_t i = 0; i < l; ++i)
    for (std::int64_t j = i + 1; j < s; ++j) later[static_cast<std::size_t>(i * s + j)] = 1;
  causal_ = Tensor::from_vector(later, {l, s}, device);
  return causal_;
}

std::tuple<Variable, Variable> MultiheadAttention::forward(const Variable& query, const Variable& key,
                                                           const Variable& value, const Tensor& key_padding_mask,
                                                           bool need_weights, const Tensor& attn_mask,
                                                           bool average_attn_weights, bool is_causal) {
  DPL_CHECK(query.defined() && key.defined() && value.defined(),
            "MultiheadAttention: expected query, key and value, got an undefined Variable");
  const std::int64_t e = options_.embed_dim(), h = options_.num_heads(), d = e / h;
  const std::size_t rank = query.shape().size();
  DPL_CHECK((rank == 2 || rank == 3) && key.shape().size() == rank && value.shape().size() == rank,
            "MultiheadAttention: expected query, key and value all batched (3-D) or all unbatched (2-D), got ",
            shape_str(query.shape()), ", ", shape_str(key.shape()), " and ", shape_str(value.shape()));
  const bool batched = rank == 3;
  // Every input as (N, L, E): the rows of a batch element together.
  const auto batch_major = [&](const Variable& t) {
    if (!batched) return unsqueeze(t, 0);
    return options_.batch_first() ? t : transpose(t, 0, 1);
  };
  const Variable qi = batch_major(query), ki = batch_major(key), vi = batch_major(value);
  const std::int64_t n = qi.shape()[0], l = qi.shape()[1], s = ki.shape()[1];
  DPL_CHECK(qi.shape()[2] == e && ki.shape()[2] == e && vi.shape()[2] == e && ki.shape()[0] == n &&
                vi.shape()[0] == n && vi.shape()[1] == s,
            "MultiheadAttention: expected query (L, N, ", e, "), key and value (S, N, ", e, ")",
            options_.batch_first() ? " (batch first: (N, L, E) and (N, S, E))" : "",
            " or unbatched (L, E) and (S, E), got ", shape_str(query.shape()), ", ", shape_str(key.shape()), " and ",
            shape_str(value.shape()));
  const Device device = query.data().device();

  // The projections, each (N, T, E) -> (N, H, T, D).
  const auto heads = [&](const Variable& x, std::int64_t i, std::int64_t t) {
    const Variable y = linear(x, block(in_proj_weight_, i, e), block(in_proj_bias_, i, e));
    return permute(reshape(y, {n, t, h, d}), {0, 2, 1, 3});
  };
  const Variable q = heads(qi, 0, l), k = heads(ki, 1, s), v = heads(vi, 2, s);

  const bool dropping = is_training() && options_.dropout() > 0.f;
  Variable attended, weights;  // (N, H, L, D) and (N, H, L, S)
  if (!need_weights && !key_padding_mask.defined() && !attn_mask.defined() && !dropping) {
    attended = scaled_dot_product_attention(q, k, v, is_causal);
  } else {
    Variable scores = matmul(q, transpose(k, 2, 3)) * static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    if (attn_mask.defined()) {
      check_mask(attn_mask, device, {Shape{l, s}, Shape{n * h, l, s}}, "attn_mask");
      scores = apply_mask(scores, attn_mask.dim() == 2 ? attn_mask : attn_mask.reshape({n, h, l, s}));
    }
    if (key_padding_mask.defined()) {
      check_mask(key_padding_mask, device, {batched ? Shape{n, s} : Shape{s}}, "key_padding_mask");
      scores = apply_mask(scores, key_padding_mask.reshape({n, 1, 1, s}));
    }
    if (is_causal) scores = apply_mask(scores, causal_mask(l, s, device));
    weights = softmax(scores);
    if (dropping) weights = dropout(weights, options_.dropout(), *gen_, true);
    attended = matmul(weights, v);
  }
  // The heads merged back in order, (N, L, E), then the output projection.
  Variable out = out_proj_->forward(reshape(permute(attended, {0, 2, 1, 3}), {n, l, e}));
  out = !batched ? reshape(out, {l, e}) : options_.batch_first() ? out : transpose(out, 0, 1);
  if (!need_weights) return {out, Variable()};
  if (average_attn_weights) weights = mean(weights, {1});
  if (!batched) weights = squeeze(weights, 0);
  return {out, weights};
}

}  // namespace dpl::nn
