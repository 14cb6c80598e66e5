#pragma once
// Learning-rate schedules: the learning rate as a pure function of the iteration.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpl/optim/optimizer.hpp"

namespace dpl::optim {

/// A learning rate for every iteration. Iterations count updates from 0: lr_at(0) is the rate
/// of the first update, lr_at(k) the rate of the update made after k others, which is
/// Optimizer::t() just before that update.
///
/// Every schedule is a pure function of the iteration: it keeps no state that advances, so a run
/// resumed at iteration k (from a checkpoint, or on another rank) gets exactly the rates the
/// uninterrupted run would have used, and lr_at may be called in any order.
///
/// Constructors check their arguments and throw dpl::Error naming the schedule and the value.
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;

  /// The learning rate at iteration. Requires iteration >= 0 (else dpl::Error naming the
  /// schedule and the value). Ensures a finite value >= 0.
  double lr_at(std::int64_t iteration) const;
  /// The learning rate at the first iteration of epoch: lr_at(epoch * iterations_per_epoch).
  /// Requires epoch >= 0 and iterations_per_epoch >= 1. A schedule whose periods are meant in
  /// epochs is built with those periods times iterations_per_epoch.
  double lr_at_epoch(std::int64_t epoch, std::int64_t iterations_per_epoch) const;
  /// Sets optimizer's learning rate to lr_at(iteration). Works through decorators such as
  /// parallel::MultiNodeOptimizer, which forward set_lr. Call it before each update, with
  /// optimizer.t() as the iteration.
  void apply(Optimizer& optimizer, std::int64_t iteration) const;
  /// The schedule's class name, used in error messages ("StepDecay", ...).
  virtual std::string name() const = 0;

 protected:
  /// The rate at iteration, which lr_at has already checked to be >= 0.
  virtual double compute(std::int64_t iteration) const = 0;
};

/// The same rate at every iteration. Requires lr finite and >= 0.
class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double lr);
  std::string name() const override { return "ConstantLr"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double lr_;
};

/// Step decay: base * gamma^floor(iteration / step_size), i.e. multiplied by gamma every
/// step_size iterations. Requires base finite and >= 0, gamma finite and > 0, step_size >= 1.
class StepDecay : public LrSchedule {
 public:
  StepDecay(double base, double gamma, std::int64_t step_size);
  std::string name() const override { return "StepDecay"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double base_, gamma_;
  std::int64_t step_size_;
};

/// Decay at milestones: base * gamma^(number of milestones <= iteration), so the rate is
/// multiplied by gamma when the iteration reaches each milestone. Requires base finite and
/// >= 0, gamma finite and > 0, milestones >= 1 and strictly increasing (none: a constant rate).
class MultiStepDecay : public LrSchedule {
 public:
  MultiStepDecay(double base, double gamma, std::vector<std::int64_t> milestones);
  std::string name() const override { return "MultiStepDecay"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double base_, gamma_;
  std::vector<std::int64_t> milestones_;
};

/// Chainer's ExponentialShift: the rate starts at base and is multiplied by rate each time the
/// shift fires, every `every` iterations: base * rate^floor(iteration / every). With a bound,
/// the rate stops there: it never falls below the bound when rate < 1, never rises above it when
/// rate > 1. Requires base finite and >= 0, rate finite and > 0, every >= 1, bound finite and
/// >= 0.
class ExponentialShift : public LrSchedule {
 public:
  ExponentialShift(double base, double rate, std::int64_t every = 1, std::optional<double> bound = std::nullopt);
  std::string name() const override { return "ExponentialShift"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double base_, rate_;
  std::int64_t every_;
  std::optional<double> bound_;
};

/// Linear change from start (iteration 0) to end (iteration `iterations` and after):
/// start + (end - start) * min(iteration, iterations) / iterations. Requires start and end
/// finite and >= 0, iterations >= 1.
class LinearShift : public LrSchedule {
 public:
  LinearShift(double start, double end, std::int64_t iterations);
  std::string name() const override { return "LinearShift"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double start_, end_;
  std::int64_t iterations_;
};

/// Cosine annealing from base (iteration 0) to final_lr (iteration `iterations` and after):
/// final_lr + (base - final_lr) * (1 + cos(pi * min(iteration, iterations) / iterations)) / 2.
/// Requires base and final_lr finite and >= 0, iterations >= 1.
class CosineAnnealing : public LrSchedule {
 public:
  CosineAnnealing(double base, double final_lr, std::int64_t iterations);
  std::string name() const override { return "CosineAnnealing"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  double base_, final_;
  std::int64_t iterations_;
};

/// A linear warmup in front of another schedule: for iteration < iterations the rate rises
/// linearly from start towards after.lr_at(0), start + (after.lr_at(0) - start) * iteration /
/// iterations; from then on it is after.lr_at(iteration - iterations), so the schedule after the
/// warmup runs on its own clock (its periods and milestones count from the warmup's end).
/// Requires a non-null after, start finite and >= 0, iterations >= 0 (0: no warmup).
class LinearWarmup : public LrSchedule {
 public:
  LinearWarmup(std::shared_ptr<const LrSchedule> after, double start, std::int64_t iterations);
  std::string name() const override { return "LinearWarmup"; }

 protected:
  double compute(std::int64_t iteration) const override;

 private:
  std::shared_ptr<const LrSchedule> after_;
  double start_;
  std::int64_t iterations_;
};

/// Puts a linear warmup of `iterations` iterations from start in front of schedule (a copy).
template <typename Schedule>
LinearWarmup with_warmup(Schedule schedule, double start, std::int64_t iterations) {
  return LinearWarmup(std::make_shared<const Schedule>(std::move(schedule)), start, iterations);
}

}  // namespace dpl::optim
