#include "dpl/nn/resampling.hpp"

namespace dpl::nn {

Variable Upsample::forward(const Variable& x) {
  return interpolate(x, options_.size(), options_.scale_factor(), options_.mode(), options_.align_corners());
}

}  // namespace dpl::nn
