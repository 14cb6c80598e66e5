#pragma once
// Embedding: a lookup table of learned vectors, indexed by integer ids (tokens, categories).

#include <cstdint>
#include <optional>

#include "dpl/core/random.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of an Embedding layer, as libtorch's EmbeddingOptions:
/// `EmbeddingOptions(10000, 256).padding_idx(0)`. The layer checks the values.
struct EmbeddingOptions {
  EmbeddingOptions(std::int64_t num_embeddings, std::int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  /// Rows of the table (ids 0 .. num_embeddings-1); must be >= 1.
  DPL_ARG(std::int64_t, num_embeddings);
  /// Length of each vector; must be >= 1.
  DPL_ARG(std::int64_t, embedding_dim);
  /// The id whose row is zero at construction and never gets a gradient (a padding token); a
  /// negative value counts from the end, as in PyTorch. Must be in [-num_embeddings,
  /// num_embeddings). None by default.
  DPL_ARG(std::optional<std::int64_t>, padding_idx) = std::nullopt;
};

/// y = weight[ids], as PyTorch's nn.Embedding: one parameter "weight" (num_embeddings,
/// embedding_dim) drawn from N(0, 1), its padding_idx row (if any) set to zero, so a PyTorch
/// state_dict loads with load_weights. Backward adds each output row's gradient into the weight
/// row it was read from (repeated ids add up), never into the padding row.
class Embedding : public Module {
 public:
  /// Requires num_embeddings >= 1, embedding_dim >= 1 and padding_idx (when given) in range;
  /// throws dpl::Error otherwise. Draws the weight from gen.
  explicit Embedding(const EmbeddingOptions& options, Generator& gen = default_generator());
  /// Embedding(EmbeddingOptions(num_embeddings, embedding_dim), gen).
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Generator& gen = default_generator());
  /// Requires ids (the id tensor as a Variable, `Variable(ids)`): int64 or int32 of any shape,
  /// on the weight's device, each in [0, num_embeddings) (checked on the CPU; an id out of range
  /// gives NaN on a GPU). Returns ids' shape plus (embedding_dim,), of the weight's dtype.
  Variable forward(const Variable& ids) override;
  const Variable& weight() const { return weight_; }
  /// The settings the layer was built with, padding_idx as given.
  const EmbeddingOptions& options() const { return options_; }

 private:
  EmbeddingOptions options_;
  Variable weight_;
};

}  // namespace dpl::nn
