#pragma once
// A model's weights (parameters and buffers, by name) in a safetensors file. These live beside the
// file format rather than in nn, so that modules know nothing of files.

#include <string>
#include <utility>
#include <vector>

#include "dpl/nn/module.hpp"

namespace dpl::serialize {

/// Writes every parameter and buffer of model to path as a safetensors file, under the names of
/// named_parameters() and named_buffers(), parameters first, each in registration order.
///
/// Requires: a model whose tensors may live on any device (they are copied to the host).
/// Ensures: path holds the complete file or, on failure, what it held before (see
/// serialize::save_safetensors); the model is not changed.
void save_weights(const nn::Module& model, const std::string& path);

/// Reads the safetensors file at path into model's parameters and buffers, copying each value
/// into the existing tensor, on whatever device the model is: the tensors keep their storage, so
/// views such as the parameter arena stay bound and optimizers keep their state.
///
/// Requires: a file that holds, for every parameter and buffer of model, a tensor of the same
/// name, dtype and shape; with strict, no other tensors (without it, the others are ignored).
/// Ensures: every parameter and buffer holds the file's value. Throws dpl::Error naming the file
/// and the missing, unexpected (strict only), mis-typed or mis-shaped tensors (the first ten, and
/// how many more), or a file problem (see serialize::load_safetensors); every check runs before
/// the first copy, so on an error the model is unchanged.
void load_weights(nn::Module& model, const std::string& path, bool strict = true);

}  // namespace dpl::serialize

namespace dpl::serialize {

/// Why tensors (named as save_weights names them) do not fit model: the missing, mis-typed,
/// mis-shaped and, with strict, unexpected tensors, the first ten of them and how many more, in
/// one line. Ensures: empty exactly when load_weights(model, tensors, ..., strict) would succeed.
std::string weights_mismatch(const nn::Module& model, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             bool strict = true);

/// As load_weights(model, path, strict), from tensors already in memory (a checkpoint holds the
/// weights beside other state); source names where they came from in the error message.
void load_weights(nn::Module& model, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::string& source, bool strict = true);

}  // namespace dpl::serialize

namespace dpl::nn {
// The names these functions had when they were declared in dpl::nn, kept for programs written
// against them.
using serialize::load_weights;
using serialize::save_weights;
using serialize::weights_mismatch;
}  // namespace dpl::nn
