#include "dpl/nn/init.hpp"

#include <cmath>
#include <vector>

#include "dpl/core/error.hpp"

namespace dpl::nn::init {

namespace {

// Draws t's values on the host in float32 with `draw`, then writes them into t in place (any
// device, any float dtype: rounded once).
template <typename Draw>
Tensor fill_with(Tensor t, const char* who, Draw&& draw) {
  DPL_CHECK(t.defined(), "nn::init::", who, ": expected a defined tensor, got an undefined one");
  DPL_CHECK(is_float_dtype(t.dtype()), "nn::init::", who, ": expected a float tensor, got ", t.dtype());
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  for (float& v : values) v = draw();
  t.copy_(Tensor::from_vector(values, t.shape()).to(t.dtype()).to(t.device()));
  return t;
}

// The standard normal CDF.
double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double fan_of(const Tensor& t, FanMode mode) {
  const Fans f = fans(t);
  return static_cast<double>(mode == FanMode::kFanIn ? f.in : f.out);
}

}  // namespace

Fans fans(const Tensor& weight) {
  DPL_CHECK(weight.dim() >= 2, "nn::init: fan in and fan out need a tensor of rank >= 2 (out, in, ...), got shape ",
            shape_str(weight.shape()));
  std::int64_t receptive = 1;
  for (std::int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "conv_transpose1d" || nonlinearity == "conv_transpose2d" ||
      nonlinearity == "conv_transpose3d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param < 0.0 ? 0.01 : param;
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 0.75;
  DPL_FAIL("nn::init::calculate_gain: expected linear, conv1d, conv2d, conv3d, conv_transpose1d/2d/3d, sigmoid, "
           "tanh, relu, leaky_relu or selu, got '", nonlinearity, "'");
}

Tensor uniform_(Tensor t, double a, double b, Generator& gen) {
  DPL_CHECK(a <= b, "nn::init::uniform_: expected a <= b, got [", a, ", ", b, ")");
  return fill_with(std::move(t), "uniform_", [&] { return gen.uniform(static_cast<float>(a), static_cast<float>(b)); });
}

Tensor normal_(Tensor t, double mean, double std, Generator& gen) {
  DPL_CHECK(std >= 0.0, "nn::init::normal_: expected std >= 0, got ", std);
  return fill_with(std::move(t), "normal_", [&] { return gen.normal(static_cast<float>(mean), static_cast<float>(std)); });
}

Tensor trunc_normal_(Tensor t, double mean, double std, double a, double b, Generator& gen) {
  DPL_CHECK(std > 0.0 && a < b, "nn::init::trunc_normal_: expected std > 0 and a < b, got std ", std, " and [", a,
            ", ", b, "]");
  const double mass = phi((b - mean) / std) - phi((a - mean) / std);
  DPL_CHECK(mass >= 1e-6, "nn::init::trunc_normal_: [", a, ", ", b, "] holds a share of only ", mass,
            " of N(", mean, ", ", std, "^2); expected at least 1e-6");
  return fill_with(std::move(t), "trunc_normal_", [&] {
    for (;;) {
      const float v = gen.normal(static_cast<float>(mean), static_cast<float>(std));
      if (v >= a && v <= b) return v;
    }
  });
}

Tensor constant_(Tensor t, double value) {
  DPL_CHECK(t.defined(), "nn::init::constant_: expected a defined tensor, got an undefined one");
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }

Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor xavier_uniform_(Tensor t, double gain, Generator& gen) {
  const Fans f = fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.in + f.out));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator& gen) {
  const Fans f = fans(t);
  return normal_(std::move(t), 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.in + f.out)), gen);
}

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, const std::string& nonlinearity, Generator& gen) {
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan_of(t, mode));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, const std::string& nonlinearity, Generator& gen) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_of(t, mode));
  return normal_(std::move(t), 0.0, std, gen);
}

}  // namespace dpl::nn::init
