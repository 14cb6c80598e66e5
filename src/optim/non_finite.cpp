#include "optim/non_finite.hpp"

#include <cmath>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::optim {

const char* to_string(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkip: return "skip";
    case NonFinitePolicy::kOff: return "off";
  }
  return "unknown";
}

namespace non_finite {

std::string first_non_finite_parameter(nn::Module& model, const Tensor& grads) {
  const std::vector<float> values = grads.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
  // Entries are in offset order, so the first hit is the first parameter with one.
  for (const nn::ArenaEntry& e : model.arena().entries())
    for (std::int64_t i = e.offset; i < e.offset + e.numel && i < static_cast<std::int64_t>(values.size()); ++i)
      if (!std::isfinite(values[static_cast<std::size_t>(i)])) return e.name;
  return {};
}

std::string non_finite_message(std::int64_t iteration, const std::string& parameter, const std::string& where,
                               const std::string& loss) {
  // An empty name happens when the averaged gradients came out finite although a rank flagged
  // its own (an Inf and a -Inf cannot cancel, so in practice: never); say so rather than guess.
  const std::string what = parameter.empty() ? std::string("a parameter (not located in the averaged gradients)")
                                             : "parameter '" + parameter + "'";
  return dpl::detail::concat("iteration ", iteration, ": non-finite gradient (Inf or NaN) of ", what, where, "; ",
                             loss, ". Expected finite gradients; the non-finite policy 'stop' ends training here ",
                             "(set_non_finite_policy(NonFinitePolicy::kSkip) would skip such steps)");
}

}  // namespace non_finite
}  // namespace dpl::optim
