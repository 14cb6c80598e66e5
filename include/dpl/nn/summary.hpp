#pragma once
// A printable summary of a model: one row per layer with its output shape and parameter count.

#include <string>

#include "dpl/core/dtype.hpp"
#include "dpl/core/shape.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

/// A table of `model`'s layers and the totals, found by running a zero input of `input_shape`
/// (including the batch dimension) and `dtype` through the model on its device() under
/// NoGradGuard. The rows are the model's direct children with name, type, output shape and
/// parameter count (a child's parameters include its sub-modules'); for a Sequential each child
/// runs on the previous child's output, so each row shows its own output shape, and for any other
/// model the last row is the model's output. Ends with the total and trainable parameter counts.
/// Requires an input the model accepts (its errors propagate). The forward runs in evaluation
/// mode (no dropout draws, no running-statistics updates); the model's training flag is restored
/// afterwards with train(was_training) on the whole model.
std::string summary(Module& model, const Shape& input_shape, DType dtype = kFloat32);

}  // namespace dpl::nn
