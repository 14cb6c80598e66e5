#include "dpl/optim/mixed_precision.hpp"

#include <cmath>

#include "optim/mixed_precision_stage.hpp"

namespace dpl::optim {

namespace {
// The stage of a 16-bit dtype (null for float32, a pass-through), once the settings are checked.
std::unique_ptr<MixedPrecisionStage> make_stage(DType dtype, const LossScaling& scaling) {
  DPL_CHECK(is_float_dtype(dtype), "MixedPrecision: expected a compute dtype float32, bfloat16 or float16, got ",
            dtype);
  DPL_CHECK(std::isfinite(scaling.init_scale) && scaling.init_scale > 0.0,
            "MixedPrecision: expected a finite init_scale > 0, got ", scaling.init_scale);
  DPL_CHECK(std::isfinite(scaling.growth_factor) && scaling.growth_factor > 1.0,
            "MixedPrecision: expected a finite growth_factor > 1, got ", scaling.growth_factor);
  DPL_CHECK(scaling.backoff_factor > 0.0 && scaling.backoff_factor < 1.0,
            "MixedPrecision: expected a backoff_factor in (0, 1), got ", scaling.backoff_factor);
  DPL_CHECK(scaling.growth_interval >= 1, "MixedPrecision: expected a growth_interval >= 1 step, got ",
            scaling.growth_interval);
  if (dtype == kFloat32) return nullptr;
  return std::make_unique<MixedPrecisionStage>(dtype, scaling);
}
}  // namespace

MixedPrecision::MixedPrecision(std::unique_ptr<Optimizer> actual, DType dtype, LossScaling scaling)
    : MixedPrecision(std::move(actual), dtype, make_stage(dtype, scaling)) {}

MixedPrecision::MixedPrecision(std::unique_ptr<Optimizer> actual, DType dtype,
                               std::unique_ptr<MixedPrecisionStage> stage)
    : OptimizerWrapper("MixedPrecision", std::move(actual), std::move(stage)),
      dtype_(dtype),
      stage_(static_cast<MixedPrecisionStage*>(OptimizerWrapper::stage())) {
  if (stage_ == nullptr) return;
  // The default policy, kStop, is this stage's; the wrapped optimizer's own check goes off.
  stage_->set_non_finite_policy(NonFinitePolicy::kStop);
}

MixedPrecision::~MixedPrecision() = default;

const MixedPrecisionStage& MixedPrecision::masters() const {
  DPL_CHECK(stage_ != nullptr, "MixedPrecision: call setup(model) with a 16-bit dtype before using the masters");
  return *stage_;
}

Variable MixedPrecision::scale(const Variable& loss) const { return stage_ != nullptr ? stage_->scale(loss) : loss; }
double MixedPrecision::loss_scale() const { return stage_ != nullptr ? stage_->loss_scale() : 1.0; }
std::int64_t MixedPrecision::good_steps() const { return stage_ != nullptr ? stage_->good_steps() : 0; }
const Tensor& MixedPrecision::master_params() const { return masters().master_params(); }
const Tensor& MixedPrecision::master_grads() const { return masters().master_grads(); }

std::unique_ptr<MixedPrecision> mixed_precision(std::unique_ptr<Optimizer> actual, DType dtype,
                                                LossScaling scaling) {
  return std::make_unique<MixedPrecision>(std::move(actual), dtype, scaling);
}

}  // namespace dpl::optim
