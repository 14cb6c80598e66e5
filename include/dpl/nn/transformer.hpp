#pragma once
// TransformerEncoderLayer and TransformerEncoder: the encoder of "Attention is all you need" as
// PyTorch's nn.TransformerEncoderLayer and nn.TransformerEncoder build it.

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

/// Settings of a TransformerEncoderLayer, as libtorch's TransformerEncoderLayerOptions:
/// `TransformerEncoderLayerOptions(512, 8).dim_feedforward(2048).norm_first(true)`.
struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(std::int64_t d_model, std::int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  /// Width of the rows (E); >= 1, divisible by nhead.
  DPL_ARG(std::int64_t, d_model);
  /// Attention heads; >= 1.
  DPL_ARG(std::int64_t, nhead);
  /// Width of the feed-forward block's hidden layer; >= 1.
  DPL_ARG(std::int64_t, dim_feedforward) = 2048;
  /// Dropout after the attention, inside and after the feed-forward block, and of the attention
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
  Variable feed_forward(const Variable& x);
  Variable drop(const Variable& x);

  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  Generator* gen_;
};

/// Settings of a TransformerEncoder: num_layers layers of `layer`'s settings, and with norm(true) a
/// final LayerNorm (PyTorch's `norm` argument, as pre-norm stacks use).
struct TransformerEncoderOptions {
  TransformerEncoderOptions(TransformerEncoderLayerOptions layer, std::int64_t num_layers)
      : layer_(layer), num_layers_(num_layers) {}
  DPL_ARG(TransformerEncoderLayerOptions, layer);
  /// >= 1.
  DPL_ARG(std::int64_t, num_layers);
  DPL_ARG(bool, norm) = false;
};

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
  TransformerEncoderOptions options_;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

}  // namespace dpl::nn
