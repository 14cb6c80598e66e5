#pragma once
// A small classification problem for tests of training: normal features, uniform labels.

#include <cstdint>

#include "dpl/core/random.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::test {

/// n samples of 5 standard-normal features with labels in [0, 3), all drawn from a Generator
/// seeded with seed: the same data for the same arguments.
inline data::Dataset random_dataset(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::normal({n, 5}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({n}, kInt32);
  for (std::int64_t i = 0; i < n; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(3)));
  return data::Dataset(x, y);
}

}  // namespace dpl::test
