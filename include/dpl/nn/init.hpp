#pragma once
// Initialisers, as torch.nn.init: they overwrite a parameter's values in place (its storage stays,
// so a module's parameter arena and an optimizer set up on it stay bound).

#include <cstdint>
#include <string>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::nn::init {

/// Which fan the Kaiming initialisers preserve: the forward pass's variance (fan in) or the
/// backward pass's (fan out).
enum class FanMode { kFanIn, kFanOut };

/// The fans of a weight as PyTorch computes them: for a tensor of rank >= 2, fan_in = size(1) *
/// receptive field and fan_out = size(0) * receptive field, where the receptive field is the
/// product of the sizes after the second (1 for a Linear's (out, in) weight). Requires rank >= 2
/// (dpl::Error otherwise, as PyTorch refuses fewer than two dimensions).
struct Fans {
  std::int64_t in;
  std::int64_t out;
};
Fans fans(const Tensor& weight);

/// PyTorch's calculate_gain: "linear", "conv1d", "conv2d", "conv3d", "sigmoid" 1; "tanh" 5/3;
/// "relu" sqrt(2); "leaky_relu" sqrt(2 / (1 + param^2)) (param the negative slope, default 0.01
/// when param < 0); "selu" 3/4. Throws dpl::Error naming the accepted names for another.
double calculate_gain(const std::string& nonlinearity, double param = -1.0);

// Every initialiser below writes every element of t (any float dtype, any device, any shape
// unless stated; values are drawn in float32 on the host from gen and rounded once to t's dtype)
// and returns t. A Variable's overload writes its data().

/// Uniform on [a, b).
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator& gen = default_generator());
/// Normal(mean, std).
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
/// Normal(mean, std) truncated to [a, b] (the distribution of PyTorch's trunc_normal_; drawn by
/// redrawing values outside). Requires std > 0, a < b, and a chance of at least 1e-6 that a
/// normal draw lands in [a, b] (dpl::Error otherwise, which would otherwise take forever).
Tensor trunc_normal_(Tensor t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                     Generator& gen = default_generator());
/// Every element = value.
Tensor constant_(Tensor t, double value);
/// Every element = 0.
Tensor zeros_(Tensor t);
/// Every element = 1.
Tensor ones_(Tensor t);
/// Glorot uniform: U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)). Rank >= 2.
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator& gen = default_generator());
/// Glorot normal: N(0, gain * sqrt(2 / (fan_in + fan_out))). Rank >= 2.
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator& gen = default_generator());
/// He uniform: U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity,
/// a), fan by mode. PyTorch's defaults (a 0, fan in, leaky_relu). Rank >= 2.
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                        const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator());
/// He normal: N(0, gain / sqrt(fan)), gain and fan as kaiming_uniform_. Rank >= 2.
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                       const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator());

/// The same initialisers on a Variable's data (a parameter), which keeps its storage.
inline Tensor uniform_(const Variable& v, double a = 0.0, double b = 1.0, Generator& gen = default_generator()) {
  return uniform_(v.data(), a, b, gen);
}
inline Tensor normal_(const Variable& v, double mean = 0.0, double std = 1.0, Generator& gen = default_generator()) {
  return normal_(v.data(), mean, std, gen);
}
inline Tensor trunc_normal_(const Variable& v, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                            Generator& gen = default_generator()) {
  return trunc_normal_(v.data(), mean, std, a, b, gen);
}
inline Tensor constant_(const Variable& v, double value) { return constant_(v.data(), value); }
inline Tensor zeros_(const Variable& v) { return zeros_(v.data()); }
inline Tensor ones_(const Variable& v) { return ones_(v.data()); }
inline Tensor xavier_uniform_(const Variable& v, double gain = 1.0, Generator& gen = default_generator()) {
  return xavier_uniform_(v.data(), gain, gen);
}
inline Tensor xavier_normal_(const Variable& v, double gain = 1.0, Generator& gen = default_generator()) {
  return xavier_normal_(v.data(), gain, gen);
}
inline Tensor kaiming_uniform_(const Variable& v, double a = 0.0, FanMode mode = FanMode::kFanIn,
                               const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator()) {
  return kaiming_uniform_(v.data(), a, mode, nonlinearity, gen);
}
inline Tensor kaiming_normal_(const Variable& v, double a = 0.0, FanMode mode = FanMode::kFanIn,
                              const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator()) {
  return kaiming_normal_(v.data(), a, mode, nonlinearity, gen);
}

}  // namespace dpl::nn::init
