#pragma once
// Text from a trained GPT-2: top-k sampling one token at a time, as nanoGPT's sample.py does,
// without a key-value cache (each new token runs the model over the whole context, at most the
// block size): a few hundred tokens at the end of a run, where simplicity matters more than speed.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"
#include "dpl/models/gpt2.hpp"

namespace dpl::examples {

/// How to sample: the k most likely tokens compete (k = 1: greedy), softmax at temperature, and
/// only ids below `vocabulary` are drawn (a model's vocabulary may be padded beyond the
/// tokenizer's, and a padded id decodes to nothing).
struct SamplingOptions {
  std::int64_t tokens = 200;
  std::int64_t top_k = 40;
  double temperature = 1.0;
  std::int64_t vocabulary = 0;
  /// Generation stops after this id (the end of a document), which is not returned.
  std::int32_t stop_at = -1;
};

/// Up to options.tokens ids that follow `prompt` (non-empty), drawn with gen. Requires top_k >= 1,
/// temperature > 0, and 1 <= vocabulary <= the model's vocab_size.
inline std::vector<std::int32_t> sample_tokens(models::GPT2& model, const std::vector<std::int32_t>& prompt,
                                               const SamplingOptions& options, Generator& gen, Device device) {
  const NoGradGuard no_grad;
  const std::int64_t block = model.config().block_size;
  std::vector<std::int32_t> context = prompt, generated;
  std::vector<float> last(static_cast<std::size_t>(options.vocabulary));
  std::vector<std::int32_t> order(last.size());
  for (std::int64_t n = 0; n < options.tokens; ++n) {
    const auto length = std::min<std::int64_t>(block, static_cast<std::int64_t>(context.size()));
    const std::vector<std::int32_t> window(context.end() - length, context.end());
    const Tensor ids = Tensor::from_vector(window, {1, length}).to(device);
    // (1, length, V): only the last position's logits predict the next token.
    Tensor logits = model(Variable(ids)).data().narrow(1, length - 1, 1).contiguous().to(Device::cpu());
    if (logits.dtype() != kFloat32) logits = logits.to(kFloat32);
    const std::vector<float> all = logits.to_vector<float>();
    std::copy_n(all.begin(), last.size(), last.begin());
    std::iota(order.begin(), order.end(), 0);
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(options.top_k, options.vocabulary));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](std::int32_t a, std::int32_t b) { return last[a] > last[b]; });
    // Softmax over the k best, shifted by the largest logit so that exp cannot overflow.
    std::vector<double> weights(k);
    for (std::size_t i = 0; i < k; ++i)
      weights[i] = std::exp((last[order[i]] - last[order[0]]) / options.temperature);
    double draw = gen.uniform(0.f, 1.f) * std::accumulate(weights.begin(), weights.end(), 0.0);
    std::size_t pick = 0;
    while (pick + 1 < k && draw >= weights[pick]) draw -= weights[pick++];
    const std::int32_t next = order[pick];
    if (next == options.stop_at) break;
    generated.push_back(next);
    context.push_back(next);
  }
  return generated;
}

}  // namespace dpl::examples
