#pragma once
// MultiheadAttention: the attention layer of transformers other than GPT-2's (encoders, decoders'
// cross-attention, vision transformers), as PyTorch's nn.MultiheadAttention.

#include <cstdint>
#include <memory>
#include <tuple>

#include "dpl/core/random.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of a MultiheadAttention layer, as libtorch's MultiheadAttentionOptions:
/// `MultiheadAttentionOptions(512, 8).dropout(0.1).batch_first(true)`. The layer checks the values.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(std::int64_t embed_dim, std::int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  /// Width of the query, key, value and output rows (E); must be >= 1 and divisible by num_heads.
  DPL_ARG(std::int64_t, embed_dim);
  /// Number of heads (H); each attends over E / H of the width. Must be >= 1.
  DPL_ARG(std::int64_t, num_heads);
  /// Probability of zeroing an attention weight in training (scaling the rest by 1 / (1 - p));
  /// in [0, 1). 0 by default.
  DPL_ARG(float, dropout) = 0.f;
  /// Whether the input and output projections add learned biases (default true).
  DPL_ARG(bool, bias) = true;
  /// Inputs and output as (N, L, E) instead of (L, N, E) (default false, as PyTorch).
  DPL_ARG(bool, batch_first) = false;
};

/// Multi-head attention, as PyTorch's nn.MultiheadAttention with kdim = vdim = embed_dim:
///   q, k, v = the query, key and value projected by the three (E, E) blocks of in_proj_weight
///   (and in_proj_bias), each split into H heads of D = E / H;
///   weights = softmax(q kᵀ / sqrt(D) + masks) per head, then dropout in training;
///   out = out_proj(the heads' weights · v, merged back).
/// Parameters and names as PyTorch's, so its state_dict loads with load_weights:
/// "in_proj_weight" (3E, E), "in_proj_bias" (3E,), "out_proj.weight" (E, E), "out_proj.bias" (E,)
/// (the biases only with bias(true)). Initialisation as PyTorch's: in_proj_weight Xavier-uniform,
/// out_proj.weight uniform in ±1 / sqrt(E), biases zero.
///
/// Without masks, attention weights to return and dropout, the attention runs as one
/// scaled_dot_product_attention (the fused kernels of docs/ops.md, "Attention"); otherwise as its
/// composition (products, masks, softmax), which keeps the (N, H, L, S) weights.
class MultiheadAttention : public Module {
 public:
  /// Requires embed_dim >= 1, num_heads >= 1 dividing it, dropout in [0, 1); throws dpl::Error
  /// otherwise. Draws the weights and the dropout masks from gen, which must outlive the layer.
  explicit MultiheadAttention(const MultiheadAttentionOptions& options, Generator& gen = default_generator());
  /// MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads), gen).
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, Generator& gen = default_generator());

  /// Attention of query over key and value, as PyTorch's forward. Batched: query (L, N, E), key
  /// and value (S, N, E) ((N, L, E) and (N, S, E) with batch_first); unbatched: (L, E) and (S, E).
  /// One float dtype and device, the layer's.
  /// key_padding_mask: none (undefined), or (N, S) ((S,) unbatched): uint8 0/1, where 1 excludes
  /// that key for every query (PyTorch's True), or float, added to the scores.
  /// attn_mask: none, or (L, S) or (N * H, L, S) ((H, L, S) unbatched): uint8 0/1, where 1
  /// excludes that key for that query, or float, added to the scores. A query whose keys are all
  /// excluded gets NaN, as in PyTorch.
  /// is_causal: query i sees keys 0..i only (top-left alignment), on top of the masks.
  /// Returns (out, weights): out as query's shape; weights, when need_weights, the attention
  /// weights (after dropout) averaged over the heads, (N, L, S), or per head, (N, H, L, S), without
  /// average_attn_weights (unbatched: without N); an undefined Variable otherwise.
  std::tuple<Variable, Variable> forward(const Variable& query, const Variable& key, const Variable& value,
                                         const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                         const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                         bool is_causal = false);

  const Variable& in_proj_weight() const { return in_proj_weight_; }
  /// Undefined without bias.
  const Variable& in_proj_bias() const { return in_proj_bias_; }
  const Linear& out_proj() const { return *out_proj_; }
  const MultiheadAttentionOptions& options() const { return options_; }

 private:
  // The uint8 mask of l queries over s keys that leaves out key j > i, on device: built on the host
  // for the first call of a shape and device and kept, so later calls (a CUDA graph's recording
  // among them) copy nothing to the device.
  const Tensor& causal_mask(std::int64_t l, std::int64_t s, const Device& device);

  MultiheadAttentionOptions options_;
  Variable in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
  Generator* gen_;  // the dropout's draws
  Tensor causal_;   // the last causal_mask
};

}  // namespace dpl::nn
