#pragma once
// The per-element value and derivative of each PointwiseLoss, written once for the CPU and CUDA
// kernels (compiled for both where nvcc compiles it), so that the two backends compute the same
// expressions. Internal header of the backend.

#include <math.h>  // the float functions (logf, expf, log1pf) that host and device code share

#include "backend/kernels.hpp"

namespace dpl::backend {

// PyTorch clamps BCE's logs at -100 so that a probability of exactly 0 or 1 gives a finite loss.
DPL_HOST_DEVICE inline float clamped_log(float v) {
  const float l = logf(v);
  return l < -100.f ? -100.f : l;
}

/// The loss of one element: x the input, t the target, param smooth L1's beta, w the pos_weight.
DPL_HOST_DEVICE inline float pointwise_loss_value(PointwiseLoss kind, float param, float x, float t, float w) {
  switch (kind) {
    case PointwiseLoss::kMse: return (x - t) * (x - t);
    case PointwiseLoss::kL1: return fabsf(x - t);
    case PointwiseLoss::kSmoothL1: {
      const float d = fabsf(x - t);
      return d < param ? 0.5f * d * d / param : d - 0.5f * param;
    }
    case PointwiseLoss::kBce: return -(t * clamped_log(x) + (1.f - t) * clamped_log(1.f - x));
    case PointwiseLoss::kBceWithLogits: {
      const float softplus = log1pf(expf(-fabsf(x))) + (x < 0.f ? -x : 0.f);  // log(1 + exp(-x)), stably
      return (1.f - t) * x + (1.f + (w - 1.f) * t) * softplus;
    }
  }
  return 0.f;
}

/// d loss / d x of one element, PyTorch's formulas (BCE's denominator clamped at 1e-12).
DPL_HOST_DEVICE inline float pointwise_loss_derivative(PointwiseLoss kind, float param, float x, float t, float w) {
  const float d = x - t;
  const float sign = d > 0.f ? 1.f : d < 0.f ? -1.f : 0.f;
  switch (kind) {
    case PointwiseLoss::kMse: return 2.f * d;
    case PointwiseLoss::kL1: return sign;
    case PointwiseLoss::kSmoothL1: return fabsf(d) < param ? d / param : sign;
    case PointwiseLoss::kBce: {
      const float denom = (1.f - x) * x;
      return d / (denom > 1e-12f ? denom : 1e-12f);
    }
    case PointwiseLoss::kBceWithLogits: {
      const float s = 1.f / (1.f + expf(-x));
      return (w * t + 1.f - t) * s - w * t;
    }
  }
  return 0.f;
}

}  // namespace dpl::backend
