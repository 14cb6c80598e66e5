#pragma once
// Resampling layers: Upsample.

#include <optional>

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of an Upsample layer, as libtorch's UpsampleOptions:
/// `UpsampleOptions().scale_factor(2.0).mode(InterpolateMode::kBilinear).align_corners(false)`.
/// Give exactly one of size and scale_factor; dpl::interpolate checks the values on each forward.
struct UpsampleOptions {
  /// Extent (Ho, Wo) of the output (one number: both).
  DPL_ARG(std::optional<Size2d>, size);
  /// Multiplier of H and W (one number: both); the output is floor(H * scale), likewise W.
  DPL_ARG(std::optional<Scale2d>, scale_factor);
  /// kNearest (PyTorch's default 'nearest') or kBilinear.
  DPL_ARG(InterpolateMode, mode) = InterpolateMode::kNearest;
  /// Bilinear only: map the corner pixels' centres onto each other (default false, PyTorch's
  /// behaviour when align_corners is left unset).
  DPL_ARG(bool, align_corners) = false;
};

/// dpl::interpolate with fixed settings (PyTorch's nn.Upsample); no parameters or buffers.
class Upsample : public Module {
 public:
  /// The values are checked by each forward (dpl::interpolate).
  explicit Upsample(const UpsampleOptions& options = {}) : options_(options) {}
  /// Requires what dpl::interpolate requires of x; returns (N, C, Ho, Wo), contiguous.
  Variable forward(const Variable& x) override;
  /// The settings the layer was built with.
  const UpsampleOptions& options() const { return options_; }

 private:
  UpsampleOptions options_;
};

}  // namespace dpl::nn
