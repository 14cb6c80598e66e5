#include "dpl/models/gpt2.hpp"

#include <cmath>
#include <set>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/error.hpp"
#include "dpl/nn/init.hpp"

namespace dpl::models {

namespace {

constexpr double kInitStd = 0.02;

void check_config(const GPT2Config& c) {
  DPL_CHECK(c.vocab_size >= 1, "GPT2: expected vocab_size >= 1, got ", c.vocab_size);
  DPL_CHECK(c.block_size >= 1, "GPT2: expected block_size >= 1, got ", c.block_size);
  DPL_CHECK(c.n_layer >= 1, "GPT2: expected n_layer >= 1, got ", c.n_layer);
  DPL_CHECK(c.n_head >= 1, "GPT2: expected n_head >= 1, got ", c.n_head);
  DPL_CHECK(c.n_embd >= 1 && c.n_embd % c.n_head == 0, "GPT2: expected n_embd >= 1 divisible by n_head (", c.n_head,
            "), got ", c.n_embd);
}

// A Linear initialised as nanoGPT initialises one: weight N(0, std), bias 0. Linear draws its own
// default init when it is built; that draw goes to a throwaway generator so that `gen` yields
// exactly one draw per weight, in registration order.
std::shared_ptr<nn::Linear> linear_layer(std::int64_t in, std::int64_t out, bool bias, double std, Generator& gen) {
  Generator scratch(0);
  auto l = std::make_shared<nn::Linear>(nn::LinearOptions(in, out).bias(bias), scratch);
  nn::init::normal_(l->weight(), 0.0, std, gen);
  if (bias) nn::init::zeros_(l->bias());
  return l;
}

std::shared_ptr<nn::LayerNorm> layer_norm(const GPT2Config& c) {
  return std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({c.n_embd}).bias(c.bias));
}

std::shared_ptr<nn::Embedding> embedding_layer(std::int64_t rows, std::int64_t dim, Generator& gen) {
  Generator scratch(0);
  auto e = std::make_shared<nn::Embedding>(rows, dim, scratch);
  nn::init::normal_(e->weight(), 0.0, kInitStd, gen);
  return e;
}

// nanoGPT's scaled init of the projections into the residual stream (GPT-2 paper, section 2.3).
double residual_std(const GPT2Config& c) { return kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layer)); }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Drops `lm_head.weight` after checking that it is the tied transformer.wte.weight, and every
// name for which `drop` holds; `fix` converts the rest (a rename, a transpose).
template <typename Drop, typename Fix>
NamedTensors convert(const char* what, const NamedTensors& tensors, Drop&& drop, Fix&& fix) {
  NamedTensors out;
  const Tensor* head = nullptr;
  for (const auto& [name, t] : tensors) {
    if (name == "lm_head.weight") {
      head = &t;
      continue;
    }
    if (drop(name)) continue;
    out.push_back(fix(name, t));
  }
  if (head != nullptr) {
    const Tensor* wte = nullptr;
    for (const auto& [name, t] : out)
      if (name == "transformer.wte.weight") wte = &t;
    DPL_CHECK(wte != nullptr, what, ": expected transformer.wte.weight beside lm_head.weight (GPT2 ties the head to ",
              "it), got no transformer.wte.weight");
    DPL_CHECK(head->shape() == wte->shape() &&
                  head->to(kFloat32).to_vector<float>() == wte->to(kFloat32).to_vector<float>(),
              what, ": expected lm_head.weight equal to transformer.wte.weight (GPT2 ties them into one parameter), ",
              "got a different tensor: an untied head cannot be loaded");
  }
  return out;
}

bool is_attention_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

}  // namespace

GPT2Config GPT2Config::preset(const std::string& name) {
  if (name == "124M" || name == "gpt2") return gpt2_124m();
  if (name == "350M" || name == "gpt2-medium") return gpt2_350m();
  if (name == "774M" || name == "gpt2-large") return gpt2_774m();
  if (name == "1558M" || name == "gpt2-xl") return gpt2_1558m();
  DPL_FAIL("GPT2Config::preset: expected 124M, 350M, 774M, 1558M, gpt2, gpt2-medium, gpt2-large or gpt2-xl, got \"",
           name, "\"");
}

std::int64_t GPT2Config::num_parameters() const {
  const std::int64_t c = n_embd, b = bias ? 1 : 0;
  const std::int64_t ln = c * (1 + b);
  const std::int64_t block = 2 * ln + (c * 3 * c + b * 3 * c) + (c * c + b * c) + (c * 4 * c + b * 4 * c) +
                             (4 * c * c + b * c);
  return vocab_size * c + block_size * c + n_layer * block + ln;
}

CausalSelfAttention::CausalSelfAttention(const GPT2Config& config, Generator& gen) : n_head_(config.n_head) {
  check_config(config);
  c_attn_ = register_module("c_attn", linear_layer(config.n_embd, 3 * config.n_embd, config.bias, kInitStd, gen));
  c_proj_ =
      register_module("c_proj", linear_layer(config.n_embd, config.n_embd, config.bias, residual_std(config), gen));
}

Variable CausalSelfAttention::forward(const Variable& x) {
  DPL_CHECK(x.defined() && x.shape().size() == 3, "CausalSelfAttention: expected x (B, T, C), got ",
            x.defined() ? shape_str(x.shape()) : std::string("an undefined Variable"));
  // The packed form reads q, k and v as views of c_attn's (B, T, 3C) output and writes their
  // gradients straight into its gradient, with the heads merged in its (B, T, C) result.
  return c_proj_->forward(scaled_dot_product_attention_packed(c_attn_->forward(x), n_head_, true));
}

GPT2MLP::GPT2MLP(const GPT2Config& config, Generator& gen) {
  check_config(config);
  c_fc_ = register_module("c_fc", linear_layer(config.n_embd, 4 * config.n_embd, config.bias, kInitStd, gen));
  c_proj_ =
      register_module("c_proj", linear_layer(4 * config.n_embd, config.n_embd, config.bias, residual_std(config), gen));
}

Variable GPT2MLP::forward(const Variable& x) {
  // One op: the GELU and its derivative run inside the two layers' matrix products.
  return gelu_mlp(x, c_fc_->weight(), c_fc_->bias(), c_proj_->weight(), c_proj_->bias());
}

GPT2Block::GPT2Block(const GPT2Config& config, Generator& gen) {
  ln_1_ = register_module("ln_1", layer_norm(config));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(config, gen));
  ln_2_ = register_module("ln_2", layer_norm(config));
  mlp_ = register_module("mlp", std::make_shared<GPT2MLP>(config, gen));
}

Variable GPT2Block::forward(const Variable& x) {
  const Variable h = x + attn_->forward(ln_1_->forward(x));
  return h + mlp_->forward(ln_2_->forward(h));
}

GPT2Transformer::GPT2Transformer(const GPT2Config& config, Generator& gen) {
  check_config(config);
  wte_ = register_module("wte", embedding_layer(config.vocab_size, config.n_embd, gen));
  wpe_ = register_module("wpe", embedding_layer(config.block_size, config.n_embd, gen));
  h_ = register_module("h", std::make_shared<nn::ModuleList>());
  for (std::int64_t i = 0; i < config.n_layer; ++i) h_->push_back(std::make_shared<GPT2Block>(config, gen));
  ln_f_ = register_module("ln_f", layer_norm(config));
}

GPT2::GPT2(const GPT2Config& config, Generator& gen) : config_(config) {
  check_config(config);
  transformer_ = register_module("transformer", std::make_shared<GPT2Transformer>(config, gen));
}

Variable GPT2::hidden(const Variable& ids) {
  DPL_CHECK(ids.defined(), "GPT2: expected ids (B, T), got an undefined Variable");
  const Tensor& t = ids.data();
  DPL_CHECK(t.dim() == 2 && t.size(0) >= 1 && t.size(1) >= 1, "GPT2: expected ids (B, T) with B, T >= 1, got ",
            shape_str(t.shape()));
  DPL_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, "GPT2: expected int64 or int32 ids, got ", t.dtype());
  const std::int64_t T = t.size(1);
  DPL_CHECK(T <= config_.block_size, "GPT2: expected a sequence of at most block_size = ", config_.block_size,
            " tokens, got T = ", T);
  if (t.device().is_cpu()) {
    const Tensor dense = t.contiguous();
    const std::int64_t n = dense.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t id = t.dtype() == kInt64 ? dense.data<std::int64_t>()[i] : dense.data<std::int32_t>()[i];
      DPL_CHECK(id >= 0 && id < config_.vocab_size, "GPT2: expected token ids in [0, vocab_size = ",
                config_.vocab_size, "), got ", id, " at flat index ", i, " of ids ", shape_str(t.shape()));
    }
  }
  const GPT2Transformer& body = *transformer_;
  // wpe[0..T) is the first T rows of its weight: a view, whose gradient lands in those rows.
  Variable x = body.wte_->forward(ids) + narrow(body.wpe_->weight(), 0, 0, T);
  const bool checkpointed = checkpoint_blocks_ && is_training() && grad_enabled();
  for (const auto& block : *body.h_)
    x = checkpointed ? checkpoint([block = block](const Variable& in) { return block->forward(in); }, x)
                     : block->forward(x);
  return body.ln_f_->forward(x);
}

// The tied head: logits = ln_f(x) wte^T.
Variable GPT2::forward(const Variable& ids) { return linear(hidden(ids), transformer_->wte_->weight()); }

Variable GPT2::loss(const Variable& ids, const Tensor& targets, std::int64_t chunk_rows) {
  const Variable h = hidden(ids);
  const Shape& s = h.shape();
  const std::int64_t rows = s[0] * s[1];
  DPL_CHECK(targets.defined() && (targets.shape() == Shape{s[0], s[1]} || targets.shape() == Shape{rows}),
            "GPT2::loss: expected targets of shape (", s[0], ", ", s[1], ") or (", rows, ",) for ids of shape ",
            shape_str(ids.shape()), ", got ",
            targets.defined() ? shape_str(targets.shape()) : std::string("an undefined tensor"));
  LinearCrossEntropyOptions options;
  options.chunk_rows = chunk_rows;
  return linear_cross_entropy(reshape(h, {rows, s[2]}), transformer_->wte_->weight(),
                              targets.contiguous().reshape({rows}), options);
}

std::shared_ptr<GPT2> gpt2(const GPT2Config& config, Generator& gen) { return std::make_shared<GPT2>(config, gen); }

NamedTensors gpt2_from_nanogpt(const NamedTensors& tensors) {
  return convert(
      "gpt2_from_nanogpt", tensors, [](const std::string& name) { return is_attention_buffer(name); },
      [](const std::string& name, const Tensor& t) { return std::make_pair(name, t); });
}

NamedTensors gpt2_from_huggingface(const NamedTensors& tensors) {
  return convert(
      "gpt2_from_huggingface", tensors, [](const std::string& name) { return is_attention_buffer(name); },
      [](const std::string& name, const Tensor& t) {
        const bool body = name.rfind("h.", 0) == 0 || name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0 ||
                          name.rfind("ln_f.", 0) == 0;
        const std::string full = body ? "transformer." + name : name;
        for (const char* conv1d :
             {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
          if (!ends_with(full, conv1d)) continue;
          DPL_CHECK(t.dim() == 2, "gpt2_from_huggingface: expected ", full,
                    " to be a 2-D Conv1D weight (in, out), got ", shape_str(t.shape()));
          // Conv1D keeps (in, out); Linear wants (out, in).
          return std::make_pair(full, transpose(Variable(t), 0, 1).data().contiguous());
        }
        return std::make_pair(full, t);
      });
}

}  // namespace dpl::models
