#include "optim/mixed_precision_stage.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "backend/kernels.hpp"
#include "dpl/autograd/ops.hpp"

namespace dpl::optim {

namespace {

// The float32 master weights as a module of their own, so that the wrapped optimizer runs on
// them unchanged: one float32 arena whose entries have the model's order and sizes, hence the
// model's offsets (the arena aligns by elements, whatever the dtype).
//
// The masters keep the model's dotted names, so that what the wrapped optimizer selects by name
// (parameter groups, LARS's exclusions) finds them: a dotted name is not a valid name for one
// module's own parameter, so each prefix becomes a sub-module, created in the model's order,
// which gives the model's order back.
class MasterNode : public nn::Module {
 public:
  Variable forward(const Variable&) override {
    DPL_FAIL("MixedPrecision: the master weights are not a model to run; run the model itself");
  }
  void add(const std::string& name, Tensor value) { register_parameter(name, std::move(value)); }
  MasterNode& child(const std::string& name) {
    auto found = children_.find(name);
    if (found == children_.end()) found = children_.emplace(name, register_module(name, std::make_shared<MasterNode>())).first;
    return *found->second;
  }

 private:
  std::map<std::string, std::shared_ptr<MasterNode>> children_;
};

class MasterWeights final : public MasterNode {
 public:
  explicit MasterWeights(const std::vector<std::pair<std::string, Variable>>& named) {
    for (const auto& [name, var] : named) {
      MasterNode* owner = this;
      std::size_t begin = 0;
      for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', begin)) {
        owner = &owner->child(name.substr(begin, dot - begin));
        begin = dot + 1;
      }
      owner->add(name.substr(begin), var.data().to(kFloat32));
    }
  }
};

constexpr const char* kScaleKey = "loss_scale";
constexpr const char* kGoodStepsKey = "loss_scale_good_steps";

}  // namespace

void MixedPrecisionStage::set_non_finite_policy(NonFinitePolicy policy) {
  non_finite_ = policy;
  // The masters' gradients are checked in the pass that fills them; a second check by the
  // wrapped optimizer would read them again for nothing.
  next().set_non_finite_policy(NonFinitePolicy::kOff);
}

bool MixedPrecisionStage::stops_on_non_finite() const {
  return dtype_ == kBFloat16 && non_finite_ == NonFinitePolicy::kStop;
}

void MixedPrecisionStage::setup(nn::Module& model) {
  if (replay_) set_replay_mode(false, Tensor());
  target_ = &model;
  scale_ = dtype_ == kFloat16 ? scaling_.init_scale : 1.0;
  good_steps_ = 0;
  reset_counters();
  if (sharded()) {
    // A new setup starts from whole masters; a data-parallel stage shards them again after.
    shard_.clear();
    shard_params_ = shard_grads_ = staged_grads_ = Tensor();
    next().set_state_shard({});
  }
  const auto named = model.named_parameters();
  for (const auto& [name, var] : named)
    DPL_CHECK(is_float_dtype(var.dtype()), "MixedPrecision::setup: expected parameter '", name,
              "' of a float dtype, got ", var.dtype());
  masters_ = std::make_unique<MasterWeights>(named);
  for (const auto& [name, var] : named) {
    Variable v = var;
    if (v.dtype() != dtype_) v.set_data(v.data().to(dtype_));
  }
  nn::ParameterArena& arena = model.arena();
  model_arena_ = arena.id();
  next().setup(*masters_);
  const nn::ParameterArena& master = masters_->arena();
  // The two arenas must line up element for element for the one-pass casts between them.
  DPL_CHECK(master.numel() == arena.numel() && master.entries().size() == arena.entries().size() &&
                master.device() == arena.device(),
            "MixedPrecision::setup: the master arena (", master.numel(), " elements on ", master.device(),
            ") does not line up with the model's (", arena.numel(), " on ", arena.device(), ")");
  for (std::size_t s = 0; s < arena.entries().size(); ++s)
    DPL_CHECK(master.entries()[s].name == arena.entries()[s].name && master.entries()[s].offset == arena.entries()[s].offset,
              "MixedPrecision::setup: master parameter ", s, " is '", master.entries()[s].name, "', expected '",
              arena.entries()[s].name, "' at the model's offset");
}

nn::ParameterArena& MixedPrecisionStage::model_arena() const {
  DPL_CHECK(masters_ != nullptr || sharded(), "MixedPrecision: call setup(model) with a 16-bit dtype before using the masters");
  nn::ParameterArena& arena = target().arena();
  DPL_CHECK(arena.id() == model_arena_,
            "MixedPrecision: the model's parameters changed after setup() (a parameter added, or data replaced); ",
            "call setup(model) again so that the float32 master weights match them");
  return arena;
}

nn::ParameterArena& MixedPrecisionStage::master_arena() const {
  DPL_CHECK(masters_ != nullptr, "MixedPrecision: call setup(model) with a 16-bit dtype before using the masters");
  return masters_->arena();
}

const Tensor& MixedPrecisionStage::master_params() const {
  return sharded() ? shard_params_ : master_arena().params();
}
const Tensor& MixedPrecisionStage::master_grads() const { return sharded() ? shard_grads_ : master_arena().grads(); }

Tensor MixedPrecisionStage::prepared_gradients() {
  if (!sharded()) return master_arena().grads();
  const nn::ParameterArena& arena = model_arena();
  if (!staged_grads_.defined() || staged_grads_.numel() != arena.numel() || staged_grads_.device() != arena.device())
    staged_grads_ = Tensor::zeros({arena.numel()}, TensorOptions(kFloat32, arena.device()));
  return staged_grads_;
}

void MixedPrecisionStage::cast_masters_into_model() const {
  Tensor params = model_arena().params();
  if (!sharded()) {
    backend::cast(master_arena().params(), params);
    return;
  }
  // Only the shard's parameters: the data-parallel stage gathers the others from their ranks.
  std::int64_t at = 0;
  for (const ArenaRange& r : shard_) {
    Tensor into = params.narrow(0, r.begin, r.numel);
    backend::cast(shard_params_.narrow(0, at, r.numel), into);
    at += r.numel;
  }
}

Variable MixedPrecisionStage::scale(const Variable& loss) const {
  if (dtype_ != kFloat16) return loss;
  if (!replay_) return affine(loss, static_cast<float>(scale_), 0.f);
  // Recorded: the factor is read from the device when the step runs, so each replay scales by
  // its own step's scale (a power of two, exact in every float dtype short of float16's range).
  Tensor factor = device_scale_.narrow(0, 0, 1);
  if (loss.dtype() != kFloat32) factor = factor.to(loss.dtype());
  return mul(loss, Variable(factor));
}

std::vector<Tensor> MixedPrecisionStage::prepare_gradients() {
  const nn::ParameterArena& arena = model_arena();
  Tensor master = prepared_gradients();
  prepared_ = true;
  if (ranges_prepared_->exchange(false)) {
    // An overlapped allreduce filled (and averaged) the masters range by range: check only.
    if (dtype_ == kFloat16 || non_finite_ != NonFinitePolicy::kOff) {
      backend::flag_non_finite(master, reset_non_finite_flag(master.device()));
      return {master, flag_};
    }
    drop_non_finite_flag();
    return {master};
  }
  if (dtype_ == kFloat16 || non_finite_ != NonFinitePolicy::kOff) {
    // One pass converts, unscales (float16) and checks: the flag costs no extra read.
    Tensor flag = reset_non_finite_flag(arena.device());
    if (dtype_ == kFloat16 && replay_) {
      backend::unscale_grads_by(arena.grads(), device_scale_.narrow(0, 1, 1), master, flag);
    } else {
      const float inv_scale = dtype_ == kFloat16 ? static_cast<float>(1.0 / scale_) : 1.f;
      backend::unscale_grads(arena.grads(), inv_scale, master, flag);
    }
    return {master, flag_};
  }
  drop_non_finite_flag();
  backend::cast(arena.grads(), master);
  return {master};
}

std::vector<Tensor> MixedPrecisionStage::adopt_prepared_gradients(const Tensor& flag) {
  if (!ranges_prepared_->exchange(false)) return prepare_gradients();
  Tensor master = prepared_gradients();
  prepared_ = true;
  if (dtype_ == kFloat16 || non_finite_ != NonFinitePolicy::kOff)
    return {master, adopt_non_finite_flag(flag, master.device())};
  drop_non_finite_flag();
  return {master};
}

GradientRanges MixedPrecisionStage::gradient_ranges() {
  // Captured now, on the calling thread: the range calls touch only these tensors, never the
  // model (whose arena lookups are not for another thread).
  const Tensor source = model_arena().grads();
  const Tensor master = prepared_gradients();
  const bool convert_only = dtype_ != kFloat16;
  const float inv_scale = dtype_ == kFloat16 ? static_cast<float>(1.0 / scale_) : 1.f;
  // float16 always unscales through the checking pass; without a caller's flag it raises this
  // one, which nobody reads (prepare_gradients() checks the averaged masters): allocated once.
  if (!range_flag_.defined() || range_flag_.device() != master.device())
    range_flag_ = Tensor::zeros({1}, TensorOptions(kFloat32, master.device()));
  const Tensor scratch_flag = range_flag_;
  std::shared_ptr<std::atomic<bool>> prepared = ranges_prepared_;
  GradientRanges r;
  r.gradients = master;
  r.prepare = [source, master, convert_only, inv_scale, scratch_flag, prepared](std::int64_t begin, std::int64_t end,
                                                                               Tensor* flag) {
    DPL_CHECK(begin >= 0 && begin <= end && end <= master.numel(), "MixedPrecision gradient range: expected 0 <= begin",
              " <= end <= ", master.numel(), ", got [", begin, ", ", end, ")");
    const Tensor from = source.narrow(0, begin, end - begin);
    Tensor to = master.narrow(0, begin, end - begin);
    if (convert_only && flag == nullptr) {
      backend::cast(from, to);
    } else {
      Tensor f = flag != nullptr ? *flag : scratch_flag;
      backend::unscale_grads(from, inv_scale, to, f);
    }
    prepared->store(true);
  };
  return r;
}

void MixedPrecisionStage::update() {
  if (!prepared_) prepare_gradients();
  if (replay_) {
    // Recorded: the wrapped step skips on the device while the flag is raised, and the cast then
    // writes the unchanged masters back, so a skipped step changes nothing.
    prepared_ = false;
    next().update();
    cast_masters_into_model();
    return;
  }
  // The step's one wait for the device (none with bfloat16 and the check off). Under a
  // MultiNodeOptimizer the flag is the mean of every rank's, so it is non-zero on all ranks or
  // on none. float16 never stops here: an overflow is loss scaling's to skip.
  const bool taken = admit_step(prepared_gradients());
  adjust_scale(taken);
  if (!taken) return;
  next().update();
  cast_masters_into_model();
}

void MixedPrecisionStage::adjust_scale(bool step_taken) {
  if (dtype_ != kFloat16) return;
  if (!step_taken) {
    scale_ *= scaling_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ >= scaling_.growth_interval) {
    scale_ *= scaling_.growth_factor;
    good_steps_ = 0;
  }
}

std::string MixedPrecisionStage::replay_refusal() const { return next().replay_refusal(); }

void MixedPrecisionStage::set_replay_mode(bool on, const Tensor& skip_flag) {
  if (!on) {
    next().set_replay_mode(false, Tensor());
    replay_ = false;  // the buffers stay, as in Optimizer::set_replay_mode
    return;
  }
  const std::string why = replay_refusal();
  DPL_CHECK(why.empty(), "MixedPrecision::set_replay_mode: this optimizer cannot run a recorded step: ", why);
  // The one flag of the step: this optimizer's (averaged by a data-parallel wrapper), made now
  // so that the recording and every replay use the same buffer.
  Tensor flag = skip_flag;
  // float16 always checks: an overflow is loss scaling's to skip, whatever the policy says.
  if (!flag.defined() && (dtype_ == kFloat16 || non_finite_ != NonFinitePolicy::kOff))
    flag = reset_non_finite_flag(model_arena().device());
  if (dtype_ == kFloat16) {
    const Device device = model_arena().device();
    if (!device_scale_.defined() || device_scale_.device() != device)
      device_scale_ = Tensor::zeros({2}, TensorOptions(kFloat32, device));
    write_device_scale();
  }
  next().set_replay_mode(true, flag);
  prepared_ = false;
  replay_ = true;
}

void MixedPrecisionStage::prepare_replay() {
  DPL_CHECK(replay_, "MixedPrecision::prepare_replay: not in replay mode (call set_replay_mode(true) first)");
  model_arena();  // the recorded casts need the arena they were recorded on
  if (dtype_ == kFloat16) write_device_scale();
  next().prepare_replay();
}

void MixedPrecisionStage::write_device_scale() {
  // Queued in stream order, after the previous replay that read the old values.
  backend::write_values(device_scale_, {static_cast<float>(scale_), static_cast<float>(1.0 / scale_)});
}

void MixedPrecisionStage::finish_replay() {
  DPL_CHECK(replay_, "MixedPrecision::finish_replay: not in replay mode");
  loss_ = replay_loss_;
  const bool taken = admit_step(master_grads());
  adjust_scale(taken);
  next().count_replayed_step(taken);
}

void MixedPrecisionStage::count_replayed_step(bool taken) {
  prepared_ = false;
  if (!taken) return;
  ++iteration_;
  last_skipped_ = false;
  next().count_replayed_step(true);
}

void MixedPrecisionStage::set_state_shard(const StateShard& shard) {
  const char* who = "sharded optimizer state";
  if (shard.ranges.empty()) {
    if (!sharded()) {
      next().set_state_shard(shard);
      return;
    }
    // Whole masters again, from the model's weights: the other ranks' shards of the masters are
    // not here, and this is no collective.
    nn::Module& model = target();
    model_arena();
    masters_ = std::make_unique<MasterWeights>(model.named_parameters());
    shard_.clear();
    shard_params_ = shard_grads_ = staged_grads_ = Tensor();
    ranges_prepared_->store(false);
    next().set_state_shard({});
    next().setup(*masters_);
    return;
  }
  DPL_CHECK(masters_ != nullptr || sharded(), who, ": call setup(model) with a 16-bit dtype first");
  nn::ParameterArena& arena = model_arena();
  std::int64_t numel = 0;
  for (const ArenaRange& r : shard.ranges) {
    DPL_CHECK(r.begin >= 0 && r.numel > 0 && r.begin + r.numel <= arena.numel(), who, ": expected ranges inside the ",
              arena.numel(), "-element arena, got [", r.begin, ", ", r.begin + r.numel, ")");
    numel += r.numel;
  }
  // The shard's masters from the whole ones, exactly; when already sharded (another layout), from
  // the model's weights.
  const Tensor whole = masters_ != nullptr ? master_arena().params() : arena.params().to(kFloat32);
  Tensor params = gather_ranges(whole, shard.ranges);
  Tensor grads = Tensor::zeros({numel}, TensorOptions(kFloat32, arena.device()));
  // The wrapped rule runs over the model's own layout (its names, shapes and groups select as
  // they do unsharded) but reads and writes the shard's float32 buffers. It refuses what cannot
  // be sharded before changing anything, so a refusal leaves this stage as it was.
  next().set_state_shard({shard.ranges, params, grads, shard.sum_over_ranks});
  next().setup(target());
  shard_ = shard.ranges;
  shard_params_ = std::move(params);
  shard_grads_ = std::move(grads);
  staged_grads_ = Tensor();
  ranges_prepared_->store(false);
  masters_.reset();
}

Tensor MixedPrecisionStage::shard_gradients() { return sharded() ? shard_grads_ : next().shard_gradients(); }

std::vector<std::pair<std::string, Tensor>> MixedPrecisionStage::state() const {
  auto out = next().state();
  out.emplace_back("master", master_params());
  return out;
}

// Sharded, "master" holds the shard: the data-parallel stage gathers it with the rule's state.
std::vector<std::pair<std::string, Tensor>> MixedPrecisionStage::gathered_state() {
  auto out = next().gathered_state();
  out.emplace_back("master", master_params());
  return out;
}

std::map<std::string, double> MixedPrecisionStage::state_scalars() const {
  auto out = next().state_scalars();
  if (dtype_ == kFloat16) {
    out[kScaleKey] = scale_;
    out[kGoodStepsKey] = static_cast<double>(good_steps_);
  }
  return out;
}

void MixedPrecisionStage::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                const std::map<std::string, double>& scalars) {
  const char* who = "MixedPrecision::load_state";
  const std::int64_t n = model_arena().numel();
  Tensor live = master_params();
  Tensor master;
  std::vector<std::pair<std::string, Tensor>> inner_tensors;
  for (const auto& entry : tensors) {
    if (entry.first == "master") master = entry.second;
    else inner_tensors.push_back(entry);
  }
  DPL_CHECK(master.defined(), who, ": missing state tensor 'master' (the float32 master weights)");
  DPL_CHECK(master.dtype() == kFloat32 && master.shape() == Shape{n}, who,
            ": state tensor 'master' must be float32 of shape ", shape_str(Shape{n}),
            " (the model's parameter layout), got ", master.dtype(), " of shape ", shape_str(master.shape()));

  std::map<std::string, double> inner_scalars = scalars;
  double scale = scale_;
  std::int64_t good = good_steps_;
  if (dtype_ == kFloat16) {
    for (const char* key : {kScaleKey, kGoodStepsKey})
      DPL_CHECK(scalars.count(key) == 1, who, ": missing state scalar '", key, "'");
    scale = scalars.at(kScaleKey);
    const double g = scalars.at(kGoodStepsKey);
    DPL_CHECK(std::isfinite(scale) && scale > 0.0, who, ": expected \"", kScaleKey, "\" finite and > 0, got ", scale);
    DPL_CHECK(g >= 0.0 && g == std::floor(g) && g < static_cast<double>(scaling_.growth_interval), who,
              ": expected \"", kGoodStepsKey, "\" to be a whole number in [0, ", scaling_.growth_interval,
              ") (the growth interval), got ", g);
    good = static_cast<std::int64_t>(g);
    inner_scalars.erase(kScaleKey);
    inner_scalars.erase(kGoodStepsKey);
  }
  // The wrapped optimizer checks its part before changing anything; ours is checked already, so
  // either everything is restored or nothing is.
  next().load_state(inner_tensors, inner_scalars);
  // Sharded, the whole masters (as gathered_state() saves them) give this rank's shard.
  live.copy_(sharded() ? gather_ranges(master, shard_) : master);
  scale_ = scale;
  good_steps_ = good;
  prepared_ = last_skipped_ = false;
  cast_masters_into_model();
}

}  // namespace dpl::optim
