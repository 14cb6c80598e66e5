#pragma once
// The update rules beyond SGD, MomentumSGD and Adam: AdamW, RMSprop and Adagrad as PyTorch's
// torch.optim defines them, and the large-batch rules LAMB and LARS with per-tensor trust ratios.
// Each is one fused pass over the parameter arena (LAMB and LARS: one pass for every tensor's
// norms, then one for the update), runs in replay mode (CUDA graphs) and checkpoints its state.
// docs/optimizers.md gives each formula and its defaults.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpl/nn/options.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::optim {

/// AdamW's settings: `optim::AdamW(optim::AdamWOptions(1e-3f).weight_decay(0.05f))`. Defaults
/// are torch.optim.AdamW's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01.
struct AdamWOptions : MomentOptions<AdamWOptions> {
  explicit AdamWOptions(float lr = 1e-3f) : MomentOptions(lr, 1e-8f, 1e-2f) {}
};

/// torch.optim.AdamW (amsgrad off): p *= 1 - lr*weight_decay; m = beta1*m + (1-beta1)*g;
/// v = beta2*v + (1-beta2)*g^2; p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps), where t
/// counts the steps since m and v were last zeroed. The decay is decoupled from the gradient,
/// unlike Adam's weight_decay.
class AdamW : public MomentOptimizer {
 public:
  /// Requires a finite lr >= 0, betas in [0, 1), eps > 0 and a finite weight_decay >= 0
  /// (dpl::Error otherwise).
  explicit AdamW(const AdamWOptions& options = AdamWOptions());

 protected:
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
};

/// RMSprop's settings; defaults are torch.optim.RMSprop's: lr 0.01, alpha 0.99, eps 1e-8,
/// weight_decay 0, momentum 0, centered false.
struct RMSpropOptions {
  explicit RMSpropOptions(float lr = 1e-2f) : lr_(lr) {}
  DPL_ARG(float, lr);
  DPL_ARG(float, alpha) = 0.99f;
  DPL_ARG(float, eps) = 1e-8f;
  DPL_ARG(float, weight_decay) = 0.f;
  DPL_ARG(float, momentum) = 0.f;
  DPL_ARG(bool, centered) = false;
};

/// torch.optim.RMSprop: g = grad + weight_decay*p; square_avg = alpha*square_avg + (1-alpha)*g^2;
/// avg = sqrt(square_avg) + eps, or when centered sqrt(square_avg - grad_avg^2) + eps with
/// grad_avg = alpha*grad_avg + (1-alpha)*g; with momentum > 0: buf = momentum*buf + g/avg and
/// p -= lr*buf, else p -= lr*g/avg. State arenas: "square_avg", plus "momentum_buffer" with
/// momentum > 0 and "grad_avg" when centered.
class RMSprop : public Optimizer {
 public:
  /// Requires a finite lr >= 0, alpha in [0, 1], eps > 0, momentum in [0, 1) and a finite
  /// weight_decay >= 0 (dpl::Error otherwise).
  explicit RMSprop(const RMSpropOptions& options = RMSpropOptions());
  float lr() const override { return options_.lr(); }
  void set_lr(float lr) override;
  const RMSpropOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, Tensor>> own_state() const override;
  void add_own_scalars(std::map<std::string, double>& scalars) const override;
  void init_state(const nn::ParameterArena& arena) override;
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
  void load_own_scalars(const std::map<std::string, double>& scalars) override;

 private:
  RMSpropOptions options_;
  Tensor square_avg_, momentum_buffer_, grad_avg_;  // the last two empty when not used
};

/// Adagrad's settings; defaults are torch.optim.Adagrad's: lr 0.01, lr_decay 0, weight_decay 0,
/// initial_accumulator_value 0, eps 1e-10.
struct AdagradOptions {
  explicit AdagradOptions(float lr = 1e-2f) : lr_(lr) {}
  DPL_ARG(float, lr);
  DPL_ARG(float, lr_decay) = 0.f;
  DPL_ARG(float, weight_decay) = 0.f;
  DPL_ARG(float, initial_accumulator_value) = 0.f;
  DPL_ARG(float, eps) = 1e-10f;
};

/// torch.optim.Adagrad: g = grad + weight_decay*p; sum += g^2;
/// p -= lr/(1 + (t-1)*lr_decay) * g/(sqrt(sum) + eps), where t counts the steps since the state
/// ("sum", starting at initial_accumulator_value) was laid out ("sum_steps").
class Adagrad : public Optimizer {
 public:
  /// Requires a finite lr >= 0, finite lr_decay, weight_decay and initial_accumulator_value >= 0,
  /// and eps > 0 (dpl::Error otherwise).
  explicit Adagrad(const AdagradOptions& options = AdagradOptions());
  float lr() const override { return options_.lr(); }
  void set_lr(float lr) override;
  const AdagradOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, Tensor>> own_state() const override { return {{"sum", sum_}}; }
  void add_own_scalars(std::map<std::string, double>& scalars) const override;
  void init_state(const nn::ParameterArena& arena) override;
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
  void on_step_taken() override { ++sum_steps_; }
  void on_step_withdrawn() override { --sum_steps_; }
  void load_own_scalars(const std::map<std::string, double>& scalars) override;

 private:
  AdagradOptions options_;
  Tensor sum_;
  std::int64_t sum_steps_ = 0;
};

/// The per-tensor rules' chunk tables (one per parameter group) and the layout they were built
/// for; private to their implementation.
struct GroupSegmentTables {
  std::vector<Tensor> rows, partials;
  std::uint64_t arena = 0;
  std::vector<std::size_t> entry_groups;
};

/// LAMB's settings: lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight_decay 0.01.
struct LAMBOptions : MomentOptions<LAMBOptions> {
  explicit LAMBOptions(float lr = 1e-3f) : MomentOptions(lr, 1e-6f, 1e-2f) {}
};

/// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2): per
/// parameter tensor, m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g^2;
/// u = (m/(1-beta1^t)) / (sqrt(v/(1-beta2^t)) + eps) + weight_decay*p;
/// p -= lr * (||p|| / ||u||) * u, the trust ratio taken as 1 when either norm is 0 (no clipping
/// of the ratio or of ||p||, no gradient pre-normalisation).
class LAMB : public MomentOptimizer {
 public:
  /// Requires a finite lr >= 0, betas in [0, 1), eps > 0 and a finite weight_decay >= 0
  /// (dpl::Error otherwise).
  explicit LAMB(const LAMBOptions& options = LAMBOptions());

 protected:
  void lay_out_groups(const nn::ParameterArena& arena) override;
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
  bool elementwise() const override { return false; }

 private:
  GroupSegmentTables tables_;  // per group: the per-tensor chunk table and its partial sums (not state)
};

/// LARS's settings: lr 0.1, momentum 0.9, weight_decay 0, trust_coefficient 0.001, no exclusion.
/// `exclude_one_dimensional()` leaves out every 1-D parameter (biases, BatchNorm's weights), as
/// the large-batch ImageNet runs did.
struct LARSOptions {
  explicit LARSOptions(float lr = 0.1f) : lr_(lr) {}
  DPL_ARG(float, lr);
  DPL_ARG(float, momentum) = 0.9f;
  DPL_ARG(float, weight_decay) = 0.f;
  DPL_ARG(float, trust_coefficient) = 1e-3f;
  /// Parameters for which the predicate is true take neither the trust ratio nor weight decay.
  DPL_ARG(ParameterPredicate, exclude);

 public:
  /// exclude() of every parameter of rank <= 1.
  LARSOptions& exclude_one_dimensional() {
    exclude_ = [](const std::string&, const Shape& shape) { return shape.size() <= 1; };
    return *this;
  }
};

/// LARS (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional Networks", with
/// momentum as in the ImageNet-in-minutes runs): per parameter tensor,
/// local = trust_coefficient * ||p|| / (||g|| + weight_decay*||p||) (1 when ||p|| or ||g|| is 0);
/// velocity = momentum*velocity + lr*local*(g + weight_decay*p); p -= velocity. An excluded
/// tensor takes local = 1 and no weight decay (plain momentum SGD).
class LARS : public Optimizer {
 public:
  /// Requires a finite lr >= 0, momentum in [0, 1), a finite weight_decay >= 0 and a finite
  /// trust_coefficient > 0 (dpl::Error otherwise).
  explicit LARS(const LARSOptions& options = LARSOptions());
  float lr() const override { return options_.lr(); }
  void set_lr(float lr) override;
  const LARSOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, Tensor>> own_state() const override { return {{"velocity", velocity_}}; }
  void add_own_scalars(std::map<std::string, double>& scalars) const override;
  void init_state(const nn::ParameterArena& arena) override;
  void lay_out_groups(const nn::ParameterArena& arena) override;
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
  bool elementwise() const override { return false; }
  void load_own_scalars(const std::map<std::string, double>& scalars) override;

 private:
  LARSOptions options_;
  Tensor velocity_;
  GroupSegmentTables tables_;
};

}  // namespace dpl::optim
