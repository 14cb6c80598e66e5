#include "dpl/nn/embedding.hpp"

#include "dpl/autograd/ops.hpp"

namespace dpl::nn {

Embedding::Embedding(const EmbeddingOptions& options, Generator& gen) : options_(options) {
  const std::int64_t n = options.num_embeddings(), dim = options.embedding_dim();
  DPL_CHECK(n >= 1 && dim >= 1, "Embedding: expected num_embeddings >= 1 and embedding_dim >= 1, got ", n, " and ",
            dim);
  Tensor w = Tensor::normal({n, dim}, 0.f, 1.f, gen);
  if (const std::optional<std::int64_t> p = options.padding_idx()) {
    DPL_CHECK(*p >= -n && *p < n, "Embedding: padding_idx ", *p, " is out of range for ", n,
              " embeddings (expected one in [", -n, ", ", n - 1, "])");
    w.narrow(0, *p < 0 ? *p + n : *p, 1).fill_(0.0);
  }
  weight_ = register_parameter("weight", w);
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Generator& gen)
    : Embedding(EmbeddingOptions(num_embeddings, embedding_dim), gen) {}

Variable Embedding::forward(const Variable& ids) {
  DPL_CHECK(ids.defined(), "Embedding: expected a tensor of ids, got an undefined Variable");
  return embedding(ids.data(), weight_, options_.padding_idx());
}

}  // namespace dpl::nn
