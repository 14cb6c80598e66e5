#pragma once
// The encoder and decoder of "Attention is all you need" as PyTorch builds them:
// TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder.

#include <cstdint>
#include <memory>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/nn/attention.hpp"
#include "dpl/nn/containers.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/normalization.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// The feed-forward block's nonlinearity.
enum class TransformerActivation { kReLU, kGELU };

/// Settings of a transformer layer, encoder or decoder, as libtorch's TransformerEncoderLayerOptions
/// and TransformerDecoderLayerOptions (the same fields):
/// `TransformerEncoderLayerOptions(512, 8).dim_feedforward(2048).norm_first(true)`.
struct TransformerLayerOptions {
  TransformerLayerOptions(std::int64_t d_model, std::int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  /// Width of the rows (E); >= 1, divisible by nhead.
  DPL_ARG(std::int64_t, d_model);
  /// Attention heads; >= 1.
  DPL_ARG(std::int64_t, nhead);
  /// Width of the feed-forward block's hidden layer; >= 1.
  DPL_ARG(std::int64_t, dim_feedforward) = 2048;
  /// Dropout after each attention, inside and after the feed-forward block, and of the attention
  /// weights, in training; in [0, 1).
  DPL_ARG(float, dropout) = 0.1f;
  /// ReLU (PyTorch's default) or the exact GELU.
  DPL_ARG(TransformerActivation, activation) = TransformerActivation::kReLU;
  DPL_ARG(double, layer_norm_eps) = 1e-5;
  /// Inputs and output as (N, S, E) instead of (S, N, E).
  DPL_ARG(bool, batch_first) = false;
  /// LayerNorm before each block (pre-norm) instead of after each residual addition (post-norm,
  /// the default).
  DPL_ARG(bool, norm_first) = false;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

/// One encoder layer, as PyTorch's nn.TransformerEncoderLayer:
///   post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x))
///   pre-norm:  x = x + sa(norm1(x)); x = x + ff(norm2(x))
/// with sa the self-attention (MultiheadAttention, then dropout) and ff
/// linear2(dropout(activation(linear1(x)))) then dropout. Sub-modules and names as PyTorch's
/// ("self_attn", "linear1", "linear2", "norm1", "norm2"), so a state_dict loads with load_weights;
/// initialisation as PyTorch's (the linear layers' weights uniform in ±1 / sqrt(fan in), their
/// biases likewise).
class TransformerEncoderLayer : public Module {
 public:
  /// Requires valid options (see above); throws dpl::Error otherwise. Draws the weights and the
  /// dropout masks from gen, which must outlive the layer.
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options,
                                   Generator& gen = default_generator());
  /// src (S, N, E), (N, S, E) with batch_first, or unbatched (S, E); src_mask and
  /// src_key_padding_mask as MultiheadAttention's attn_mask and key_padding_mask; is_causal lets
  /// position i attend to positions 0..i. Returns src's shape.
  Variable forward(const Variable& src, const Tensor& src_mask = Tensor(),
                   const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false);

  const MultiheadAttention& self_attn() const { return *self_attn_; }
  const TransformerEncoderLayerOptions& options() const { return options_; }

 private:
  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  Generator* gen_;
};

/// Settings of a stack of transformer layers (TransformerEncoder, TransformerDecoder): num_layers
/// layers of `layer`'s settings, and with norm(true) a final LayerNorm (PyTorch's `norm` argument,
/// as pre-norm stacks use).
struct TransformerStackOptions {
  TransformerStackOptions(TransformerLayerOptions layer, std::int64_t num_layers)
      : layer_(layer), num_layers_(num_layers) {}
  DPL_ARG(TransformerLayerOptions, layer);
  /// >= 1.
  DPL_ARG(std::int64_t, num_layers);
  DPL_ARG(bool, norm) = false;
};
using TransformerEncoderOptions = TransformerStackOptions;
using TransformerDecoderOptions = TransformerStackOptions;

/// A stack of TransformerEncoderLayers, as PyTorch's nn.TransformerEncoder: sub-modules
/// "layers.0" .. "layers.{num_layers - 1}" and, with norm(true), "norm". Each layer draws its own
/// weights (PyTorch copies one layer's, then its users re-initialise them).
class TransformerEncoder : public Module {
 public:
  explicit TransformerEncoder(const TransformerEncoderOptions& options, Generator& gen = default_generator());
  /// Each layer in turn with the same masks, then the final norm if any. Arguments as
  /// TransformerEncoderLayer::forward.
  Variable forward(const Variable& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                   bool is_causal = false);
  const TransformerEncoderLayer& layer(std::size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

/// One decoder layer, as PyTorch's nn.TransformerDecoderLayer:
///   post-norm: x = norm1(x + sa(x)); x = norm2(x + ca(x, memory)); x = norm3(x + ff(x))
///   pre-norm:  x = x + sa(norm1(x)); x = x + ca(norm2(x), memory); x = x + ff(norm3(x))
/// with sa the self-attention ("self_attn"), ca the attention over the encoder's output
/// ("multihead_attn"), each followed by dropout, and ff as TransformerEncoderLayer's. Names
/// ("linear1", "linear2", "norm1" .. "norm3" besides) and initialisation as PyTorch's.
class TransformerDecoderLayer : public Module {
 public:
  /// As TransformerEncoderLayer's.
  explicit TransformerDecoderLayer(const TransformerDecoderLayerOptions& options,
                                   Generator& gen = default_generator());
  /// tgt (T, N, E) and memory (S, N, E) ((N, T, E) and (N, S, E) with batch_first; unbatched (T, E)
  /// and (S, E)). tgt_mask and tgt_key_padding_mask are the self-attention's attn_mask and
  /// key_padding_mask, memory_mask and memory_key_padding_mask the cross-attention's (see
  /// MultiheadAttention); tgt_is_causal lets position i of tgt attend to positions 0..i of tgt.
  /// Returns tgt's shape.
  Variable forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask = Tensor(),
                   const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                   const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false);

  const TransformerDecoderLayerOptions& options() const { return options_; }

 private:
  TransformerDecoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_, multihead_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_, norm3_;
  Generator* gen_;
};

/// A stack of TransformerDecoderLayers, as PyTorch's nn.TransformerDecoder ("layers.0" ..,
/// and "norm" with norm(true)); each layer draws its own weights.
class TransformerDecoder : public Module {
 public:
  explicit TransformerDecoder(const TransformerDecoderOptions& options, Generator& gen = default_generator());
  /// Each layer in turn over the same memory and masks, then the final norm if any. Arguments as
  /// TransformerDecoderLayer::forward.
  Variable forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask = Tensor(),
                   const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                   const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false);
  const TransformerDecoderLayer& layer(std::size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

}  // namespace dpl::nn
