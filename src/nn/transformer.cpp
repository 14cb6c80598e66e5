#include "dpl/nn/transformer.hpp"

#include <cmath>
#include <string>

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/containers.hpp"
#include "dpl/nn/init.hpp"

namespace dpl::nn {
namespace {

// Requires what MultiheadAttention does not check itself; `who` names the layer.
void check_layer_options(const TransformerLayerOptions& o, const char* who) {
  DPL_CHECK(o.dim_feedforward() >= 1, who, ": expected dim_feedforward >= 1, got ", o.dim_feedforward());
  DPL_CHECK(o.layer_norm_eps() > 0.0, who, ": expected layer_norm_eps > 0, got ", o.layer_norm_eps());
}

std::shared_ptr<MultiheadAttention> attention(const TransformerLayerOptions& o, Generator& gen) {
  return std::make_shared<MultiheadAttention>(
      MultiheadAttentionOptions(o.d_model(), o.nhead()).dropout(o.dropout()).batch_first(o.batch_first()), gen);
}

// A Linear initialised as PyTorch's: weight uniform in ±1 / sqrt(in) (Kaiming-uniform with
// a = sqrt(5)), bias uniform in the same bound.
std::shared_ptr<Linear> torch_linear(std::int64_t in, std::int64_t out, Generator& gen) {
  auto layer = std::make_shared<Linear>(LinearOptions(in, out), gen);
  init::kaiming_uniform_(layer->weight().data(), std::sqrt(5.0), init::FanMode::kFanIn, "leaky_relu", gen);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  init::uniform_(layer->bias().data(), -bound, bound, gen);
  return layer;
}

std::shared_ptr<LayerNorm> norm_layer(const TransformerLayerOptions& o) {
  return std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()));
}

// The layers' dropout: p from the options, masks from gen, only in training.
Variable drop(const Variable& x, const TransformerLayerOptions& o, Generator& gen, bool training) {
  return dropout(x, o.dropout(), gen, training);
}

// The feed-forward block: linear2(dropout(activation(linear1(x)))), then dropout.
Variable feed_forward(const Variable& x, Linear& linear1, Linear& linear2, const TransformerLayerOptions& o,
                      Generator& gen, bool training) {
  const Variable hidden = linear1.forward(x);
  const Variable active =
      o.activation() == TransformerActivation::kReLU ? relu(hidden) : gelu(hidden, GeluApproximation::kNone);
  return drop(linear2.forward(drop(active, o, gen, training)), o, gen, training);
}

// Attention of x over memory without weights, then dropout.
Variable attend(MultiheadAttention& attention, const Variable& x, const Variable& memory, const Tensor& mask,
                const Tensor& key_padding_mask, bool is_causal, const TransformerLayerOptions& o, Generator& gen,
                bool training) {
  const Variable y = std::get<0>(attention.forward(x, memory, memory, key_padding_mask, false, mask, true, is_causal));
  return drop(y, o, gen, training);
}

// num_layers new Layers of `options`, appended to `list` (the stack's "layers": "layers.0" ..).
template <typename Layer>
std::vector<std::shared_ptr<Layer>> stack_layers(ModuleList& list, const TransformerStackOptions& options,
                                                 Generator& gen, const char* who) {
  DPL_CHECK(options.num_layers() >= 1, who, ": expected num_layers >= 1, got ", options.num_layers());
  std::vector<std::shared_ptr<Layer>> layers;
  for (std::int64_t i = 0; i < options.num_layers(); ++i) {
    layers.push_back(std::make_shared<Layer>(options.layer(), gen));
    list.push_back(layers.back());
  }
  return layers;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options, Generator& gen)
    : options_(options), gen_(&gen) {
  check_layer_options(options, "TransformerEncoderLayer");
  // PyTorch's order: self_attn, linear1, linear2, norm1, norm2. MultiheadAttention checks d_model,
  // nhead and the dropout probability.
  self_attn_ = register_module("self_attn", attention(options, gen));
  linear1_ = register_module("linear1", torch_linear(options.d_model(), options.dim_feedforward(), gen));
  linear2_ = register_module("linear2", torch_linear(options.dim_feedforward(), options.d_model(), gen));
  norm1_ = register_module("norm1", norm_layer(options));
  norm2_ = register_module("norm2", norm_layer(options));
}

Variable TransformerEncoderLayer::forward(const Variable& src, const Tensor& src_mask,
                                          const Tensor& src_key_padding_mask, bool is_causal) {
  DPL_CHECK(src.defined(), "TransformerEncoderLayer: expected src, got an undefined Variable");
  const bool training = is_training();
  const auto sa = [&](const Variable& x) {
    return attend(*self_attn_, x, x, src_mask, src_key_padding_mask, is_causal, options_, *gen_, training);
  };
  const auto ff = [&](const Variable& x) { return feed_forward(x, *linear1_, *linear2_, options_, *gen_, training); };
  if (options_.norm_first()) {
    const Variable x = add(src, sa(norm1_->forward(src)));
    return add(x, ff(norm2_->forward(x)));
  }
  const Variable x = norm1_->forward(add(src, sa(src)));
  return norm2_->forward(add(x, ff(x)));
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderOptions& options, Generator& gen) {
  const auto list = register_module("layers", std::make_shared<ModuleList>());
  layers_ = stack_layers<TransformerEncoderLayer>(*list, options, gen, "TransformerEncoder");
  if (options.norm()) norm_ = register_module("norm", norm_layer(options.layer()));
}

Variable TransformerEncoder::forward(const Variable& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                     bool is_causal) {
  Variable x = src;
  for (const auto& layer : layers_) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm_ ? norm_->forward(x) : x;
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerDecoderLayerOptions& options, Generator& gen)
    : options_(options), gen_(&gen) {
  check_layer_options(options, "TransformerDecoderLayer");
  // PyTorch's order: self_attn, multihead_attn, linear1, linear2, norm1, norm2, norm3.
  self_attn_ = register_module("self_attn", attention(options, gen));
  multihead_attn_ = register_module("multihead_attn", attention(options, gen));
  linear1_ = register_module("linear1", torch_linear(options.d_model(), options.dim_feedforward(), gen));
  linear2_ = register_module("linear2", torch_linear(options.dim_feedforward(), options.d_model(), gen));
  norm1_ = register_module("norm1", norm_layer(options));
  norm2_ = register_module("norm2", norm_layer(options));
  norm3_ = register_module("norm3", norm_layer(options));
}

Variable TransformerDecoderLayer::forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask,
                                          const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                          const Tensor& memory_key_padding_mask, bool tgt_is_causal) {
  DPL_CHECK(tgt.defined() && memory.defined(), "TransformerDecoderLayer: expected tgt and memory, got an undefined ",
            "Variable");
  const bool training = is_training();
  const auto sa = [&](const Variable& x) {
    return attend(*self_attn_, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal, options_, *gen_, training);
  };
  const auto ca = [&](const Variable& x) {
    return attend(*multihead_attn_, x, memory, memory_mask, memory_key_padding_mask, false, options_, *gen_,
                  training);
  };
  const auto ff = [&](const Variable& x) { return feed_forward(x, *linear1_, *linear2_, options_, *gen_, training); };
  if (options_.norm_first()) {
    Variable x = add(tgt, sa(norm1_->forward(tgt)));
    x = add(x, ca(norm2_->forward(x)));
    return add(x, ff(norm3_->forward(x)));
  }
  Variable x = norm1_->forward(add(tgt, sa(tgt)));
  x = norm2_->forward(add(x, ca(x)));
  return norm3_->forward(add(x, ff(x)));
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderOptions& options, Generator& gen) {
  const auto list = register_module("layers", std::make_shared<ModuleList>());
  layers_ = stack_layers<TransformerDecoderLayer>(*list, options, gen, "TransformerDecoder");
  if (options.norm()) norm_ = register_module("norm", norm_layer(options.layer()));
}

Variable TransformerDecoder::forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask,
                                     const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                     const Tensor& memory_key_padding_mask, bool tgt_is_causal) {
  Variable x = tgt;
  for (const auto& layer : layers_)
    x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                       tgt_is_causal);
  return norm_ ? norm_->forward(x) : x;
}

}  // namespace dpl::nn
