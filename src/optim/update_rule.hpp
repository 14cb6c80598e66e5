#pragma once
// What the update rules (sgd.cpp, adam.cpp, rules.cpp) share: the learning-rate check, zeroed
// state, and where a kernel takes its step's values from (one group's row in replay mode).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::optim::detail {

inline void check_lr(const char* who, float lr) {
  DPL_CHECK(std::isfinite(lr) && lr >= 0.f, who, ": expected a finite learning rate >= 0, got ", lr);
}

inline Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), TensorOptions(t.dtype(), t.device())); }

// What an update kernel reads: in replay mode the device copy of the step's values and the skip
// flag; in normal mode nothing (the buffers may still exist from an earlier recording).
inline backend::UpdateSource source_of(bool replay, const Tensor& values, const Tensor& skip) {
  if (!replay) return {};
  return {values.defined() ? &values : nullptr, skip.defined() ? &skip : nullptr};
}

// One group's row of the device values in replay mode (`count` values per group, the groups one
// after the other, as Optimizer::replay_values() lays them out); undefined otherwise.
inline Tensor group_values(bool replay, const Tensor& values, std::size_t group, std::size_t count) {
  if (!replay || !values.defined()) return Tensor();
  return values.narrow(0, static_cast<std::int64_t>(group * count), static_cast<std::int64_t>(count));
}

}  // namespace dpl::optim::detail
