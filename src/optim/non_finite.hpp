#pragma once
// The failure path of the non-finite check, shared by the single-process optimizers and the
// MultiNodeOptimizer: where the first Inf or NaN sits, and the words of the error.

#include <cstdint>
#include <string>

#include "dpl/nn/module.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::optim::non_finite {

/// The name of the parameter of model whose gradient holds the first Inf or NaN of grads (a
/// buffer in the layout of model's arena, any float dtype and device), or an empty string when
/// grads is finite. Copies grads to the host: for the failure path only.
std::string first_non_finite_parameter(nn::Module& model, const Tensor& grads);

/// The message every stopping rank throws: "iteration N: non-finite gradient (Inf or NaN) of
/// parameter 'P'<where>; <loss>", then what was expected and how to skip instead. `where` is
/// " on rank(s) 1, 2" or empty for one process; `loss` says what the loss was.
std::string non_finite_message(std::int64_t iteration, const std::string& parameter, const std::string& where,
                               const std::string& loss,
                               const std::string& unlocated = "not located in the averaged gradients");

/// What the message says of the loss: NaN, Inf, -Inf, finite (its value), or not seen (undefined).
/// Reads the loss back (it waits for the device).
std::string loss_words(const Tensor& loss);

}  // namespace dpl::optim::non_finite
