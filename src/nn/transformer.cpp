#include "dpl/nn/transformer.hpp"

#include <cmath>
#include <string>

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/containers.hpp"
#include "dpl/nn/init.hpp"

namespace dpl::nn {
namespace {

// A Linear initialised as PyTorch's: weight uniform in ±1 / sqrt(in) (Kaiming-uniform with
// a = sqrt(5)), bias uniform in the same bound.
std::shared_ptr<Linear> torch_linear(std::int64_t in, std::int64_t out, Generator& gen) {
  auto layer = std::make_shared<Linear>(LinearOptions(in, out), gen);
  init::kaiming_uniform_(layer->weight().data(), std::sqrt(5.0), init::FanMode::kFanIn, "leaky_relu", gen);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  init::uniform_(layer->bias().data(), -bound, bound, gen);
  return layer;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options, Generator& gen)
    : options_(options), gen_(&gen) {
  DPL_CHECK(options.dim_feedforward() >= 1, "TransformerEncoderLayer: expected dim_feedforward >= 1, got ",
            options.dim_feedforward());
  DPL_CHECK(options.layer_norm_eps() > 0.0, "TransformerEncoderLayer: expected layer_norm_eps > 0, got ",
            options.layer_norm_eps());
  // PyTorch's order: self_attn, linear1, linear2, norm1, norm2. MultiheadAttention checks d_model,
  // nhead and the dropout probability.
  self_attn_ = register_module("self_attn", std::make_shared<MultiheadAttention>(
                                                MultiheadAttentionOptions(options.d_model(), options.nhead())
                                                    .dropout(options.dropout())
                                                    .batch_first(options.batch_first()),
                                                gen));
  linear1_ = register_module("linear1", torch_linear(options.d_model(), options.dim_feedforward(), gen));
  linear2_ = register_module("linear2", torch_linear(options.dim_feedforward(), options.d_model(), gen));
  const auto norm = [&] {
    return std::make_shared<LayerNorm>(LayerNormOptions({options.d_model()}).eps(options.layer_norm_eps()));
  };
  norm1_ = register_module("norm1", norm());
  norm2_ = register_module("norm2", norm());
}

Variable TransformerEncoderLayer::drop(const Variable& x) {
  return dropout(x, options_.dropout(), *gen_, is_training());
}

Variable TransformerEncoderLayer::feed_forward(const Variable& x) {
  const Variable hidden = linear1_->forward(x);
  const Variable active =
      options_.activation() == TransformerActivation::kReLU ? relu(hidden) : gelu(hidden, GeluApproximation::kNone);
  return drop(linear2_->forward(drop(active)));
}

Variable TransformerEncoderLayer::forward(const Variable& src, const Tensor& src_mask,
                                          const Tensor& src_key_padding_mask, bool is_causal) {
  DPL_CHECK(src.defined(), "TransformerEncoderLayer: expected src, got an undefined Variable");
  const auto attend = [&](const Variable& x) {
    return drop(std::get<0>(self_attn_->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  if (options_.norm_first()) {
    const Variable x = add(src, attend(norm1_->forward(src)));
    return add(x, feed_forward(norm2_->forward(x)));
  }
  const Variable x = norm1_->forward(add(src, attend(src)));
  return norm2_->forward(add(x, feed_forward(x)));
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderOptions& options, Generator& gen) : options_(options) {
  DPL_CHECK(options.num_layers() >= 1, "TransformerEncoder: expected num_layers >= 1, got ", options.num_layers());
  auto list = register_module("layers", std::make_shared<ModuleList>());
  for (std::int64_t i = 0; i < options.num_layers(); ++i) {
    layers_.push_back(std::make_shared<TransformerEncoderLayer>(options.layer(), gen));
    list->push_back(layers_.back());
  }
  if (options.norm())
    norm_ = register_module("norm", std::make_shared<LayerNorm>(LayerNormOptions({options.layer().d_model()})
                                                                    .eps(options.layer().layer_norm_eps())));
}

Variable TransformerEncoder::forward(const Variable& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                     bool is_causal) {
  Variable x = src;
  for (const auto& layer : layers_) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm_ ? norm_->forward(x) : x;
}

}  // namespace dpl::nn
