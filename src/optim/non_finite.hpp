#pragma once
// The failure path of the non-finite check inside optim (the public half, the parameter's name
// and the message, is in dpl/optim/step_pipeline.hpp for every stage).

#include <string>

#include "dpl/tensor/tensor.hpp"

namespace dpl::optim::non_finite {

/// What the message says of the loss: NaN, Inf, -Inf, finite (its value), or not seen (undefined).
/// Reads the loss back (it waits for the device).
std::string loss_words(const Tensor& loss);

}  // namespace dpl::optim::non_finite
