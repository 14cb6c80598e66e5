#include "optim/non_finite.hpp"

#include <cmath>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/optim/step_pipeline.hpp"

namespace dpl::optim {

const char* to_string(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkip: return "skip";
    case NonFinitePolicy::kOff: return "off";
  }
  return "unknown";
}

std::string first_non_finite_parameter(nn::Module& model, const Tensor& grads) {
  const std::vector<float> values = grads.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
  // Entries are in offset order, so the first hit is the first parameter with one.
  for (const nn::ArenaEntry& e : model.arena().entries())
    for (std::int64_t i = e.offset; i < e.offset + e.numel && i < static_cast<std::int64_t>(values.size()); ++i)
      if (!std::isfinite(values[static_cast<std::size_t>(i)])) return e.name;
  return {};
}

std::string non_finite_message(std::int64_t iteration, const std::string& parameter, const std::string& where,
                               const std::string& loss, const std::string& unlocated) {
  // An empty name happens when the averaged gradients came out finite although a rank flagged
  // its own (an Inf and a -Inf cannot cancel, so in practice: never), or when the gradients are
  // gone by the time the verdict is read; say so rather than guess.
  const std::string what = parameter.empty() ? "a parameter (" + unlocated + ")" : "parameter '" + parameter + "'";
  return dpl::detail::concat("iteration ", iteration, ": non-finite gradient (Inf or NaN) of ", what, where, "; ",
                             loss, ". Expected finite gradients; the non-finite policy 'stop' ends training here ",
                             "(set_non_finite_policy(NonFinitePolicy::kSkip) would skip such steps)");
}

namespace non_finite {

std::string loss_words(const Tensor& loss) {
  if (!loss.defined()) return "the loss was not seen (update() without a loss function)";
  // Spelled out: streams print a NaN as "nan" or "-nan" by its sign bit.
  const float v = loss.to(kFloat32).item();
  return std::isnan(v)   ? std::string("the loss was NaN")
         : std::isinf(v) ? std::string(v > 0 ? "the loss was Inf" : "the loss was -Inf")
                         : dpl::detail::concat("the loss was finite (", v, ")");
}

}  // namespace non_finite
}  // namespace dpl::optim
