#include "dpl/optim/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "dpl/core/error.hpp"

namespace dpl::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;

void check_rate(const char* who, const char* what, double v) {
  DPL_CHECK(std::isfinite(v) && v >= 0.0, who, ": expected ", what, " to be finite and >= 0, got ", v);
}
void check_factor(const char* who, const char* what, double v) {
  DPL_CHECK(std::isfinite(v) && v > 0.0, who, ": expected ", what, " to be finite and > 0, got ", v);
}
void check_period(const char* who, const char* what, std::int64_t v) {
  DPL_CHECK(v >= 1, who, ": expected ", what, " >= 1 iteration, got ", v);
}
// The fraction of `iterations` done at iteration, capped at 1.
double progress(std::int64_t iteration, std::int64_t iterations) {
  return static_cast<double>(std::min(iteration, iterations)) / static_cast<double>(iterations);
}
}  // namespace

double LrSchedule::lr_at(std::int64_t iteration) const {
  DPL_CHECK(iteration >= 0, name(), ": expected an iteration >= 0, got ", iteration);
  const double lr = compute(iteration);
  DPL_CHECK(std::isfinite(lr) && lr >= 0.0, name(), ": the rate at iteration ", iteration, " is ", lr,
            ", not a finite value >= 0");
  return lr;
}

double LrSchedule::lr_at_epoch(std::int64_t epoch, std::int64_t iterations_per_epoch) const {
  DPL_CHECK(epoch >= 0, name(), ": expected an epoch >= 0, got ", epoch);
  DPL_CHECK(iterations_per_epoch >= 1, name(), ": expected iterations_per_epoch >= 1, got ", iterations_per_epoch);
  return lr_at(epoch * iterations_per_epoch);
}

void LrSchedule::apply(Optimizer& optimizer, std::int64_t iteration) const {
  optimizer.set_lr(static_cast<float>(lr_at(iteration)));
}

ConstantLr::ConstantLr(double lr) : lr_(lr) { check_rate("ConstantLr", "the rate", lr); }
double ConstantLr::compute(std::int64_t /*iteration*/) const { return lr_; }

StepDecay::StepDecay(double base, double gamma, std::int64_t step_size)
    : base_(base), gamma_(gamma), step_size_(step_size) {
  check_rate("StepDecay", "the base rate", base);
  check_factor("StepDecay", "gamma", gamma);
  check_period("StepDecay", "the step size", step_size);
}
double StepDecay::compute(std::int64_t iteration) const {
  return base_ * std::pow(gamma_, static_cast<double>(iteration / step_size_));
}

MultiStepDecay::MultiStepDecay(double base, double gamma, std::vector<std::int64_t> milestones)
    : base_(base), gamma_(gamma), milestones_(std::move(milestones)) {
  check_rate("MultiStepDecay", "the base rate", base);
  check_factor("MultiStepDecay", "gamma", gamma);
  for (std::size_t i = 0; i < milestones_.size(); ++i) {
    check_period("MultiStepDecay", "every milestone", milestones_[i]);
    DPL_CHECK(i == 0 || milestones_[i] > milestones_[i - 1],
              "MultiStepDecay: expected strictly increasing milestones, got ", milestones_[i], " after ",
              milestones_[i - 1]);
  }
}
double MultiStepDecay::compute(std::int64_t iteration) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), iteration) - milestones_.begin();
  return base_ * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialShift::ExponentialShift(double base, double rate, std::int64_t every, std::optional<double> bound)
    : base_(base), rate_(rate), every_(every), bound_(bound) {
  check_rate("ExponentialShift", "the base rate", base);
  check_factor("ExponentialShift", "the rate factor", rate);
  check_period("ExponentialShift", "the interval", every);
  if (bound) check_rate("ExponentialShift", "the bound", *bound);
}
double ExponentialShift::compute(std::int64_t iteration) const {
  const double lr = base_ * std::pow(rate_, static_cast<double>(iteration / every_));
  if (!bound_) return lr;
  return rate_ < 1.0 ? std::max(lr, *bound_) : std::min(lr, *bound_);
}

LinearShift::LinearShift(double start, double end, std::int64_t iterations)
    : start_(start), end_(end), iterations_(iterations) {
  check_rate("LinearShift", "the start rate", start);
  check_rate("LinearShift", "the end rate", end);
  check_period("LinearShift", "the length", iterations);
}
double LinearShift::compute(std::int64_t iteration) const {
  return start_ + (end_ - start_) * progress(iteration, iterations_);
}

CosineAnnealing::CosineAnnealing(double base, double final_lr, std::int64_t iterations)
    : base_(base), final_(final_lr), iterations_(iterations) {
  check_rate("CosineAnnealing", "the base rate", base);
  check_rate("CosineAnnealing", "the final rate", final_lr);
  check_period("CosineAnnealing", "the length", iterations);
}
double CosineAnnealing::compute(std::int64_t iteration) const {
  return final_ + (base_ - final_) * (1.0 + std::cos(kPi * progress(iteration, iterations_))) / 2.0;
}

LinearWarmup::LinearWarmup(std::shared_ptr<const LrSchedule> after, double start, std::int64_t iterations)
    : after_(std::move(after)), start_(start), iterations_(iterations) {
  DPL_CHECK(after_ != nullptr, "LinearWarmup: the schedule after the warmup is null");
  check_rate("LinearWarmup", "the start rate", start);
  DPL_CHECK(iterations >= 0, "LinearWarmup: expected the warmup length >= 0 iterations, got ", iterations);
}
double LinearWarmup::compute(std::int64_t iteration) const {
  if (iteration >= iterations_) return after_->lr_at(iteration - iterations_);
  const double peak = after_->lr_at(0);
  return start_ + (peak - start_) * static_cast<double>(iteration) / static_cast<double>(iterations_);
}

}  // namespace dpl::optim
