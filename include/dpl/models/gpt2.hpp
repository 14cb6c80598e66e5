#pragma once
// GPT-2 (Radford et al. 2019) as nanoGPT writes it: a decoder-only transformer of pre-LayerNorm
// blocks with causal self-attention, learned position embeddings and a language-model head tied
// to the token embedding. Parameter names are nanoGPT's and HuggingFace's GPT2LMHeadModel's
// ("transformer.h.0.attn.c_attn.weight", ...), so their weights load (docs/transformers.md).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/nn/containers.hpp"
#include "dpl/nn/embedding.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/normalization.hpp"

namespace dpl::models {

/// The size of a GPT-2, as nanoGPT's GPTConfig (without dropout: dpl's GPT-2 has none). The
/// defaults are GPT-2 small (124M) with the vocabulary padded from 50257 to 50304, a multiple of
/// 64, as nanoGPT trains it; any other size is allowed. Checked when the model is built.
struct GPT2Config {
  /// Rows of the token embedding and columns of the logits; >= 1.
  std::int64_t vocab_size = 50304;
  /// The longest sequence (rows of the position embedding); >= 1.
  std::int64_t block_size = 1024;
  /// Transformer blocks; >= 1.
  std::int64_t n_layer = 12;
  /// Attention heads; >= 1, dividing n_embd.
  std::int64_t n_head = 12;
  /// Width of the residual stream; >= 1.
  std::int64_t n_embd = 768;
  /// Whether the Linear and LayerNorm layers have biases (GPT-2's true; nanoGPT's bias=False).
  bool bias = true;

  /// GPT-2 small: 12 layers, 12 heads, width 768 (124M parameters with vocab_size 50304).
  static GPT2Config gpt2_124m() { return {50304, 1024, 12, 12, 768, true}; }
  /// GPT-2 medium: 24 layers, 16 heads, width 1024.
  static GPT2Config gpt2_350m() { return {50304, 1024, 24, 16, 1024, true}; }
  /// GPT-2 large: 36 layers, 20 heads, width 1280.
  static GPT2Config gpt2_774m() { return {50304, 1024, 36, 20, 1280, true}; }
  /// GPT-2 XL: 48 layers, 25 heads, width 1600.
  static GPT2Config gpt2_1558m() { return {50304, 1024, 48, 25, 1600, true}; }
  /// The preset named "124M", "350M", "774M", "1558M" or by HuggingFace's model names "gpt2",
  /// "gpt2-medium", "gpt2-large", "gpt2-xl" (vocab_size 50304 in every case: set 50257 for
  /// HuggingFace's checkpoints). Throws dpl::Error naming the accepted names for another.
  static GPT2Config preset(const std::string& name);
  /// The parameter count of a model of this config (the tied head counted once).
  std::int64_t num_parameters() const;
};

/// Causal multi-head self-attention: c_attn (n_embd -> 3 n_embd, q, k, v side by side), then
/// scaled_dot_product_attention(is_causal) over n_head heads of n_embd / n_head, then c_proj.
/// The attention is the packed form (scaled_dot_product_attention_packed): q, k and v are read
/// as views of c_attn's output and their gradients written into its gradient, without copies.
class CausalSelfAttention : public nn::Module {
 public:
  /// Requires a config as GPT2Config says. Draws the weights from gen (see GPT2).
  CausalSelfAttention(const GPT2Config& config, Generator& gen);
  /// Requires x (B, T, n_embd); returns (B, T, n_embd).
  Variable forward(const Variable& x) override;
  const nn::Linear& c_attn() const { return *c_attn_; }
  const nn::Linear& c_proj() const { return *c_proj_; }

 private:
  std::int64_t n_head_;
  std::shared_ptr<nn::Linear> c_attn_, c_proj_;
};

/// The feed-forward half of a block: c_fc (n_embd -> 4 n_embd), GELU with the tanh
/// approximation, c_proj (4 n_embd -> n_embd), as one op (gelu_mlp) when the layers have biases.
class GPT2MLP : public nn::Module {
 public:
  /// Requires a config as GPT2Config says. Draws the weights from gen (see GPT2).
  GPT2MLP(const GPT2Config& config, Generator& gen);
  /// Requires x (..., n_embd); returns x's shape.
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<nn::Linear> c_fc_, c_proj_;
};

/// A pre-LayerNorm transformer block: x + attn(ln_1(x)), then that plus mlp(ln_2(that)).
/// Sub-modules in this order: ln_1, attn, ln_2, mlp.
class GPT2Block : public nn::Module {
 public:
  /// Requires a config as GPT2Config says. Draws the weights from gen (see GPT2).
  GPT2Block(const GPT2Config& config, Generator& gen);
  /// Requires x (B, T, n_embd); returns (B, T, n_embd).
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GPT2MLP> mlp_;
};

/// The body of a GPT-2, nanoGPT's `transformer` ModuleDict: wte (vocab_size, n_embd), wpe
/// (block_size, n_embd), h (a ModuleList of n_layer GPT2Blocks), ln_f. Its forward is GPT2's.
class GPT2Transformer : public nn::Module {
 public:
  /// Requires a config as GPT2Config says. Draws the weights from gen (see GPT2).
  GPT2Transformer(const GPT2Config& config, Generator& gen);
  const nn::Embedding& wte() const { return *wte_; }
  const nn::Embedding& wpe() const { return *wpe_; }
  const nn::ModuleList& h() const { return *h_; }
  const nn::LayerNorm& ln_f() const { return *ln_f_; }

 private:
  friend class GPT2;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::ModuleList> h_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

/// GPT-2 as nanoGPT's GPT: logits = ln_f(blocks(wte[ids] + wpe[0..T))) wte^T. Parameters, in
/// registration order (nanoGPT's named_parameters() order):
///   transformer.wte.weight (vocab_size, n_embd), transformer.wpe.weight (block_size, n_embd),
///   per block i: transformer.h.<i>.ln_1.{weight,bias}, .attn.c_attn.{weight,bias},
///   .attn.c_proj.{weight,bias}, .ln_2.{weight,bias}, .mlp.c_fc.{weight,bias},
///   .mlp.c_proj.{weight,bias}; then transformer.ln_f.{weight,bias} (no biases with bias=false).
/// The language-model head is transformer.wte.weight itself (weight tying): there is no
/// lm_head.weight parameter, so the head's and the embedding's gradients add up in one tensor,
/// and a nanoGPT or HuggingFace state_dict, which lists lm_head.weight too, loads after
/// gpt2_from_nanogpt or gpt2_from_huggingface. No dropout.
///
/// Initialisation, as nanoGPT's: Linear and Embedding weights N(0, 0.02), except both c_proj
/// weights (attention and MLP), N(0, 0.02 / sqrt(2 n_layer)); biases 0; LayerNorm weights 1,
/// biases 0. The draws come from gen, parameter after parameter in registration order, so equal
/// generator states build equal models.
class GPT2 : public nn::Module {
 public:
  /// Requires vocab_size, block_size, n_layer, n_head, n_embd >= 1 and n_head dividing n_embd;
  /// throws dpl::Error saying what was expected and what came otherwise.
  explicit GPT2(const GPT2Config& config, Generator& gen = default_generator());
  /// Requires ids (the id tensor as a Variable, `Variable(ids)`): (B, T), int64 or int32, on the
  /// model's device, B >= 1 and 1 <= T <= block_size, and on the CPU every id in [0, vocab_size)
  /// (dpl::Error otherwise; on a GPU ids are not read back, to keep the step free of host syncs,
  /// and an id out of range gives NaN logits, as nn::Embedding). Returns the logits (B, T,
  /// vocab_size), of the parameters' dtype.
  Variable forward(const Variable& ids) override;
  /// The mean next-token cross-entropy of forward(ids)'s logits against targets — what
  /// softmax_cross_entropy(reshape(forward(ids), {B*T, vocab_size}), targets) gives — through
  /// linear_cross_entropy with the tied head wte as its weight, so training never holds the
  /// (B*T, vocab_size) logits (1.6 GB in bfloat16 for GPT-2's usual 16 x 1024 batch), only
  /// chunks of chunk_rows rows of them (0: about 256 MiB each, see LinearCrossEntropyOptions). The
  /// head's gradient adds up with the embedding's in transformer.wte.weight's, as forward's does.
  /// ids as forward; targets int32 on the model's device, (B, T) or (B*T,), each in [0, vocab_size)
  /// (checked on the CPU; on a GPU one out of range gives a NaN loss). Returns shape () of the
  /// parameters' dtype.
  Variable loss(const Variable& ids, const Tensor& targets, std::int64_t chunk_rows = 0);
  const GPT2Config& config() const { return config_; }
  const GPT2Transformer& transformer() const { return *transformer_; }
  /// In training, run each transformer block under dpl::checkpoint (activation checkpointing, as
  /// HuggingFace's gradient_checkpointing_enable): backward keeps only each block's input and
  /// computes the block again there, one more forward pass of the blocks for the memory of
  /// their saved activations. The loss and gradients are those without it. Off by default.
  void set_checkpoint_blocks(bool on) { checkpoint_blocks_ = on; }
  bool checkpoint_blocks() const { return checkpoint_blocks_; }

 private:
  /// ln_f of the last block's output (B, T, n_embd): what the head multiplies by wte^T.
  Variable hidden(const Variable& ids);

  GPT2Config config_;
  std::shared_ptr<GPT2Transformer> transformer_;
  bool checkpoint_blocks_ = false;
};

/// Builds a GPT2 of config (see GPT2).
std::shared_ptr<GPT2> gpt2(const GPT2Config& config, Generator& gen = default_generator());

/// Named tensors, as load_weights(model, tensors, source) takes them.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A nanoGPT GPT's state_dict (saved as safetensors) in GPT2's names: lm_head.weight, nanoGPT's
/// copy of the tied transformer.wte.weight, is dropped after checking that it equals it, and so is
/// the causal-mask buffer "transformer.h.<i>.attn.bias" of nanoGPT without flash attention; the
/// rest passes unchanged. Throws dpl::Error when lm_head.weight differs from
/// transformer.wte.weight (an untied model, which GPT2 cannot hold).
NamedTensors gpt2_from_nanogpt(const NamedTensors& tensors);

/// A HuggingFace GPT-2 checkpoint (GPT2LMHeadModel's or GPT2Model's state_dict, e.g. the hub's
/// model.safetensors) in GPT2's names and layouts: HuggingFace's GPT-2 computes c_attn, c_proj and
/// c_fc with Conv1D, whose weight is stored (in, out), the transpose of Linear's (out, in), so
/// those four weights of every block are transposed (into contiguous copies); names without the
/// "transformer." prefix (GPT2Model's) get it; the buffers attn.bias and attn.masked_bias are
/// dropped, and lm_head.weight as gpt2_from_nanogpt drops it. Requires every c_attn, c_proj and
/// c_fc weight to be 2-D (dpl::Error naming the tensor otherwise). The checkpoints on the hub have
/// vocab_size 50257: build the GPT2 with that to load them.
NamedTensors gpt2_from_huggingface(const NamedTensors& tensors);

}  // namespace dpl::models
