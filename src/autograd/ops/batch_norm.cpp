// Batch normalisation of (N, C, H, W) images, and its fusions with relu, a residual add and a
// network stem's max pooling.
#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// weight, bias, running statistics: (C,) on x's device, or undefined. Statistics are float32;
// the affine parameters may also be 16-bit (a model cast by optim::MixedPrecision, whose arena
// has one dtype): the GPU's channels-last kernels read them and write their gradients in that
// dtype, and elsewhere they are widened to float32 for the kernels.
void check_channel_vector(const char* op, const Tensor& t, const Tensor& x, const char* what,
                          bool any_float = false) {
  if (!t.defined()) return;
  if (any_float) {
    DPL_CHECK(is_float_dtype(t.dtype()), op, ": expected ", what, " of dtype float32, bfloat16 or float16, got ",
              t.dtype());
  } else {
    DPL_CHECK(t.dtype() == kFloat32, op, ": expected ", what, " of dtype float32 (statistics are float32 for every",
              " input dtype), got ", t.dtype());
  }
  DPL_CHECK(t.dim() == 1 && t.size(0) == x.size(1), op, ": expected ", what, " of shape (", x.size(1),
            ",) for an input with ", x.size(1), " channels (shape ", shape_str(x.shape()), "), got ",
            shape_str(t.shape()));
  check_same_device(op, x, "an input", t, what);
  DPL_CHECK(t.is_contiguous(), op, ": expected a contiguous ", what);
}

// t itself when float32, else a float32 copy (C elements: the kernels take float32 affine
// parameters whatever the image dtype).
Tensor as_float32(const Tensor& t) { return t.dtype() == kFloat32 ? t : t.to(kFloat32); }

// target = beta*target + g for a float32 per-channel gradient g and a target of the parameter's
// dtype (16-bit under mixed precision: rounded once, here).
void accumulate_channel(const Tensor& g, GradTarget& target) {
  const Tensor& dst = *target.tensor;
  backend::axpby(1.f, dst.dtype() == g.dtype() ? g : g.to(dst.dtype()), target.beta, *target.tensor);
}

// Whether targets[k] can take a batch norm kernel's per-channel gradient ((C,), in the dtype of
// the weight it was given) as it is: a contiguous buffer of that dtype on the weight's device.
bool takes_channel_grad(const std::vector<GradTarget>& t, std::size_t k, const Tensor& weight) {
  if (t.size() <= k || !t[k].needed()) return false;
  const Tensor& dst = *t[k].tensor;
  return dst.dtype() == weight.dtype() && dst.is_contiguous() && dst.numel() == weight.numel() &&
         dst.device() == weight.device();
}

// Where a batch norm kernel that overwrites its per-channel gradients writes the one for
// targets[k]: the target itself when it takes the kernel's output as it is and holds nothing yet
// (beta 0), which saves a conversion and an addition per parameter and call; else float32 scratch
// that finish_channel_grad adds in afterwards.
Tensor channel_grad_buffer(std::vector<GradTarget>& t, std::size_t k, const Tensor& weight) {
  if (takes_channel_grad(t, k, weight) && t[k].beta == 0.f) return *t[k].tensor;
  return Tensor::empty({weight.numel()}, TensorOptions(kFloat32, weight.device()));
}
void finish_channel_grad(const Tensor& g, std::vector<GradTarget>& t, std::size_t k) {
  if (t.size() <= k || !t[k].needed()) return;
  if (g.raw_data() == t[k].tensor->raw_data()) return;  // channel_grad_buffer handed out the target itself
  accumulate_channel(g, t[k]);
}

// Where a fused batch norm kernel writes its gradients: gx into its target where the kernel may
// overwrite it (its first contribution, in x's layout: the usual case), else into scratch that
// finish() adds in; the parameters' gradients (targets `params` and `params` + 1) in place, the
// kernel accumulating with their beta, when both take them with one beta (the usual case), else
// both through channel_grad_buffer.
struct FusedGrads {
  std::size_t params = 0;
  bool gx_direct = false;
  float param_beta = 0.f;
  Tensor gx, gw, gb;

  // Whether a kernel that overwrites a gradient in x's layout may write it into target g directly.
  static bool overwritable(const GradTarget& g, const Tensor& x) {
    return g.needed() && g.beta == 0.f && g.tensor->strides() == x.strides();
  }

  FusedGrads(std::vector<GradTarget>& t, std::size_t params_at, const Tensor& x, const Tensor& weight)
      : params(params_at) {
    gx_direct = overwritable(t[0], x);
    gx = gx_direct ? *t[0].tensor : empty_in_format_of(x.shape(), x);
    const bool params_direct = takes_channel_grad(t, params, weight) && takes_channel_grad(t, params + 1, weight) &&
                               t[params].beta == t[params + 1].beta;
    param_beta = params_direct ? t[params].beta : 0.f;
    gw = params_direct ? *t[params].tensor : channel_grad_buffer(t, params, weight);
    gb = params_direct ? *t[params + 1].tensor : channel_grad_buffer(t, params + 1, weight);
  }
  void finish(std::vector<GradTarget>& t) const {
    if (t[0].needed() && !gx_direct) add_into(gx, t[0]);
    finish_channel_grad(gw, t, params);
    finish_channel_grad(gb, t, params + 1);
  }
};

// The per-channel tensors of a batch norm call, checked, with defaults for the undefined ones:
// scale 1, shift 0, and scratch running statistics that a momentum of 0 leaves unused. In
// training on a device whose kernels read 16-bit parameters in place (batch_norm_act_available),
// weight and bias are the parameters themselves; elsewhere float32 (copies when 16-bit). The
// batch counter is passed on only where the running statistics are real and updated (else a
// zero-element stand-in: the kernels' tensor arguments are all defined).
struct BatchNormArgs {
  Tensor w, b, rm, rv, batches;
  float momentum;
};

BatchNormArgs batch_norm_args(const char* op, const Tensor& tx, const Variable& weight, const Variable& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                              double eps, const Tensor& num_batches_tracked) {
  DPL_CHECK(!training || tx.size(0) * tx.size(2) * tx.size(3) >= 2, op,
            ": training mode needs at least 2 values per channel (N*H*W), got shape ", shape_str(tx.shape()));
  check_channel_vector(op, weight.defined() ? weight.data() : Tensor(), tx, "a weight", true);
  check_channel_vector(op, bias.defined() ? bias.data() : Tensor(), tx, "a bias", true);
  DPL_CHECK(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(), op,
            ": expected weight and bias of one dtype, got ", weight.dtype(), " and ", bias.dtype());
  check_channel_vector(op, running_mean, tx, "running_mean");
  check_channel_vector(op, running_var, tx, "running_var");
  DPL_CHECK(weight.defined() == bias.defined(), op, ": expected weight and bias both defined or both undefined");
  DPL_CHECK(running_mean.defined() == running_var.defined(), op,
            ": expected running_mean and running_var both defined or both undefined");
  DPL_CHECK(eps > 0.0, op, ": expected eps > 0, got ", eps);
  DPL_CHECK(momentum >= 0.0 && momentum <= 1.0, op, ": expected momentum in [0, 1], got ", momentum);
  if (num_batches_tracked.defined()) {
    DPL_CHECK(num_batches_tracked.dtype() == kInt64 && num_batches_tracked.numel() == 1, op,
              ": expected num_batches_tracked of one int64 element, got ", num_batches_tracked.dtype(), " of shape ",
              shape_str(num_batches_tracked.shape()));
    check_same_device(op, tx, "an input", num_batches_tracked, "num_batches_tracked");
  }
  const std::int64_t c = tx.size(1);
  const TensorOptions stats(kFloat32, tx.device());
  const bool in_place = training && tx.numel() > 0 && backend::batch_norm_act_available(tx);
  const auto param = [&](const Variable& v) { return in_place ? v.data() : as_float32(v.data()); };
  return {weight.defined() ? param(weight) : Tensor::ones({c}, stats),
          bias.defined() ? param(bias) : Tensor::zeros({c}, stats),
          running_mean.defined() ? running_mean : Tensor::zeros({c}, stats),
          running_var.defined() ? running_var : Tensor::ones({c}, stats),
          training && running_mean.defined() && num_batches_tracked.defined()
              ? num_batches_tracked
              : Tensor::empty({0}, TensorOptions(kInt64, tx.device())),
          running_mean.defined() ? static_cast<float>(momentum) : 0.f};
}

// Whether a training-mode call takes its statistics from `sums` (the GPU's channels-last kernels
// do; elsewhere they are ignored). Sums that are given are checked wherever they are used.
bool takes_sums(const char* op, const ChannelSums* sums, const Tensor& tx, bool training) {
  if (sums == nullptr || !sums->defined() || !training || tx.device().is_cpu() ||
      !backend::batch_norm_train_from_sums.has(backend::kCuda) || !backend::batch_norm_act_available(tx))
    return false;
  for (const Tensor* t : {&sums->sum, &sums->sum_of_squares}) {
    DPL_CHECK(t->defined() && t->dtype() == kFloat32 && t->dim() == 1 && t->size(0) == tx.size(1) &&
                  t->is_contiguous(),
              op, ": expected sums of float32 (", tx.size(1), ",) each for an input with ", tx.size(1),
              " channels, got ",
              t->defined() ? std::string(dtype_name(t->dtype())) + " " + shape_str(t->shape())
                           : std::string("an undefined tensor"));
    check_same_device(op, tx, "an input", *t, "sums");
  }
  return true;
}

class BatchNormNode final : public Node {
 public:
  Tensor x, weight, save_mean, save_invstd;
  float eps = 0.f;
  const char* name() const override { return "batch_norm"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    Tensor gw = channel_grad_buffer(t, 1, weight), gb = channel_grad_buffer(t, 2, weight);
    Tensor scratch;
    Tensor* gx = t[0].needed() ? t[0].tensor : nullptr;
    if (gx == nullptr) gx = &(scratch = empty_in_format_of(x.shape(), x));
    backend::batch_norm_backward(x, gy, weight, save_mean, save_invstd, eps, t[0].needed() ? t[0].beta : 0.f, *gx, gw,
                                 gb);
    finish_channel_grad(gw, t, 1);
    finish_channel_grad(gb, t, 2);
  }
  void release() override { x = weight = save_mean = save_invstd = Tensor(); }
};

// Evaluation mode is an affine map per channel, y = (x - mean) * invstd * weight + bias with the
// running statistics as constants (fine-tuning with frozen statistics trains through it):
// gx = gy * weight * invstd, gweight = sum(gy * xhat), gbias = sum(gy). Both come from the
// forward kernels: gx is batch_norm_infer of gy with a zero mean and bias; xhat is
// batch_norm_infer of x with a unit weight, and the training backward kernel over xhat with a
// mean of 0 and an invstd of 1 sums gy * xhat and gy (its own gx is discarded).
class BatchNormEvalNode final : public Node {
 public:
  Tensor x, weight, running_mean, running_var;  // the statistics as they were at forward
  float eps = 0.f;
  const char* name() const override { return "batch_norm"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const std::int64_t c = x.size(1);
    const Tensor zeros = Tensor::zeros({c}, TensorOptions(kFloat32, x.device()));
    if (t[0].needed()) {
      Tensor gx = empty_in_format_of(x.shape(), gy);
      backend::batch_norm_infer(gy, weight, zeros, zeros, running_var, eps, gx);
      add_into(gx, t[0]);
    }
    const bool affine = t.size() > 1;
    if (!affine || !(t[1].needed() || t[2].needed())) return;
    const Tensor ones = Tensor::ones({c}, TensorOptions(kFloat32, x.device()));
    Tensor xhat = empty_in_format_of(x.shape(), x), discarded = empty_in_format_of(x.shape(), x);
    backend::batch_norm_infer(x, ones, zeros, running_mean, running_var, eps, xhat);
    Tensor gw = empty_on({c}, weight), gb = empty_on({c}, weight);
    backend::batch_norm_backward(xhat, gy, ones, zeros, ones, 0.f, 0.f, discarded, gw, gb);
    if (t[1].needed()) accumulate_channel(gw, t[1]);
    if (t[2].needed()) accumulate_channel(gb, t[2]);
  }
  void release() override { x = weight = running_mean = running_var = Tensor(); }
};

// Backward of the fused relu(batch_norm(x) [+ z]), its gradients placed as FusedGrads says (and
// gz as gx).
class BatchNormActNode final : public Node, public OffersOutputGradReductions {
 public:
  bool add = false;
  Tensor x, y, reserve, weight, bias, save_mean, save_invstd;
  float eps = 0.f;
  // With a residual on the GPU: what the op completing y's gradient may compute for this backward.
  std::shared_ptr<OutputGradReductions> reductions;
  const char* name() const override { return add ? "batch_norm_add_relu" : "batch_norm_relu"; }
  std::shared_ptr<OutputGradReductions> output_grad_reductions() const override { return reductions; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (reductions && reductions->filled) {
      backward_from_reductions(gy, t);
      return;
    }
    // The kernel overwrites gz as it does gx: a residual's target it may overwrite takes it
    // directly, anything else goes through scratch.
    FusedGrads grads(t, add ? 2 : 1, x, weight);
    const bool gz_direct = add && FusedGrads::overwritable(t[1], x);
    Tensor gz = !add ? grads.gx : gz_direct ? *t[1].tensor : empty_in_format_of(x.shape(), x);
    backend::batch_norm_act_backward(add, x, y, gy, reserve, weight, bias, save_mean, save_invstd, eps, grads.gx, gz,
                                     grads.param_beta, grads.gw, grads.gb);
    if (add && t[1].needed() && !gz_direct) add_into(gz, t[1]);
    grads.finish(t);
  }
  void release() override {
    x = y = reserve = weight = bias = save_mean = save_invstd = Tensor();
    reductions.reset();
  }

 private:
  // gy arrived masked with its reductions (the op that completed it filled them): no reduction
  // pass; gy itself is the residual's gradient, handed on without a copy where the target allows.
  void backward_from_reductions(const Tensor& gy, std::vector<GradTarget>& t) {
    const Tensor g = in_format(gy, x.memory_format());
    FusedGrads grads(t, 2, x, weight);
    backend::batch_norm_backward_from_sums(x, g, reductions->sum_g, reductions->sum_gx, weight, save_mean, save_invstd,
                                           grads.gx, grads.param_beta, grads.gw, grads.gb);
    if (t[1].needed()) pass_into(g, t[1]);
    grads.finish(t);
  }
};

// Backward of batch_norm_relu_max_pool2d's fused pass, its gradients placed as FusedGrads says.
class BatchNormReluMaxPoolNode final : public Node {
 public:
  backend::Pool2dParams p{};
  Tensor x, y, argmax, weight, bias, save_mean, save_invstd;
  const char* name() const override { return "batch_norm_relu_max_pool2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    FusedGrads grads(t, 1, x, weight);
    backend::batch_norm_relu_max_pool_backward(p, x, y, argmax, gy, weight, bias, save_mean, save_invstd, grads.gx,
                                               grads.param_beta, grads.gw, grads.gb);
    grads.finish(t);
  }
  void release() override { x = y = argmax = weight = bias = save_mean = save_invstd = Tensor(); }
};

// relu(batch_norm(x) [+ z]) through the device's fused kernel when it has one for x (training
// mode only: evaluation is one cheap pass anyway), else composed from the plain ops.
Variable batch_norm_act(const char* op, const Variable& x, const Variable* z, const Variable& weight,
                        const Variable& bias, const Tensor& running_mean, const Tensor& running_var, bool training,
                        double momentum, double eps, const ChannelSums* sums, const Tensor& num_batches_tracked) {
  const Tensor tx = image_input(op, x);
  Tensor tz;
  if (z != nullptr) {
    check_operands(op, {{x, "an input"}, {*z, "a residual z"}});
    tz = z->data();
    DPL_CHECK(tz.shape() == tx.shape(), op, ": expected a residual z of the input's shape ", shape_str(tx.shape()),
              ", got ", shape_str(tz.shape()));
  }
  const bool fused = training && tx.numel() > 0 && backend::batch_norm_act_available(tx) &&
                     (z == nullptr || tz.strides() == tx.strides());
  if (!fused) {
    const Variable bn =
        batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, sums, num_batches_tracked);
    return relu(z == nullptr ? bn : add(bn, *z));
  }
  BatchNormArgs args =
      batch_norm_args(op, tx, weight, bias, running_mean, running_var, training, momentum, eps, num_batches_tracked);
  const std::int64_t c = tx.size(1);
  const TensorOptions stats(kFloat32, tx.device());
  Tensor y = empty_in_format_of(tx.shape(), tx);
  Tensor save_mean = Tensor::empty({c}, stats), save_invstd = Tensor::empty({c}, stats);
  const Tensor reserve =
      takes_sums(op, sums, tx, training)
          ? backend::batch_norm_train_from_sums(true, z != nullptr, tx, z != nullptr ? tz : tx, sums->sum,
                                                sums->sum_of_squares, args.w, args.b, static_cast<float>(eps),
                                                args.momentum, args.rm, args.rv, args.batches, y, save_mean,
                                                save_invstd)
          : backend::batch_norm_act_train(z != nullptr, tx, z != nullptr ? tz : tx, args.w, args.b,
                                          static_cast<float>(eps), args.momentum, args.rm, args.rv, args.batches, y,
                                          save_mean, save_invstd);
  const Variable no_residual;
  const Variable* residual = z != nullptr ? z : &no_residual;
  if (!any_requires_grad({&x, residual, &weight, &bias})) return Variable(y);
  auto node = std::make_shared<BatchNormActNode>();
  node->add = z != nullptr;
  node->x = tx;
  // Without a residual, backward recomputes the ReLU's mask from x and never reads y: a
  // zero-element stand-in keeps the graph from holding y for it (kernels.hpp).
  node->y = z != nullptr ? y : Tensor::empty({0}, TensorOptions(y.dtype(), y.device()));
  node->reserve = reserve;
  node->weight = args.w;
  node->bias = args.b;
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  node->eps = static_cast<float>(eps);
  if (z != nullptr && !tx.device().is_cpu() && backend::batch_norm_backward_from_sums.has(backend::kCuda)) {
    node->reductions = std::make_shared<OutputGradReductions>();
    node->reductions->y = y;
    node->reductions->x = tx;
    node->reductions->mean = save_mean;
  }
  node->set_inputs(defined_inputs({&x, residual, &weight, &bias}));
  return Variable::make_result(y, node);
}

}  // namespace

Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps, const ChannelSums* sums,
                    const Tensor& num_batches_tracked) {
  const char* op = "batch_norm";
  const Tensor tx = image_input(op, x);
  const std::int64_t c = tx.size(1);
  BatchNormArgs args =
      batch_norm_args(op, tx, weight, bias, running_mean, running_var, training, momentum, eps, num_batches_tracked);
  const TensorOptions stats(kFloat32, tx.device());
  Tensor y = empty_in_format_of(tx.shape(), tx);
  if (!training) {
    DPL_CHECK(running_mean.defined(), op, ": evaluation mode needs running_mean and running_var, got none");
    if (tx.numel() > 0)
      backend::batch_norm_infer(tx, args.w, args.b, running_mean, running_var, static_cast<float>(eps), y);
    if (!any_requires_grad({&x, &weight, &bias})) return Variable(y);
    auto node = std::make_shared<BatchNormEvalNode>();
    node->x = tx;
    node->weight = args.w;
    node->running_mean = running_mean.clone();
    node->running_var = running_var.clone();
    node->eps = static_cast<float>(eps);
    node->set_inputs(defined_inputs({&x, &weight, &bias}));
    return Variable::make_result(y, node);
  }
  Tensor save_mean = Tensor::empty({c}, stats), save_invstd = Tensor::empty({c}, stats);
  if (takes_sums(op, sums, tx, training))
    backend::batch_norm_train_from_sums(false, false, tx, tx, sums->sum, sums->sum_of_squares, args.w, args.b,
                                        static_cast<float>(eps), args.momentum, args.rm, args.rv, args.batches, y,
                                        save_mean, save_invstd);
  else
    backend::batch_norm_train(tx, args.w, args.b, static_cast<float>(eps), args.momentum, args.rm, args.rv,
                              args.batches, y, save_mean, save_invstd);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(y);
  auto node = std::make_shared<BatchNormNode>();
  node->x = tx;
  node->weight = args.w;
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  node->eps = static_cast<float>(eps);
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(y, node);
}

Variable batch_norm_relu(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum, double eps,
                         const ChannelSums* sums, const Tensor& num_batches_tracked) {
  return batch_norm_act("batch_norm_relu", x, nullptr, weight, bias, running_mean, running_var, training, momentum,
                        eps, sums, num_batches_tracked);
}

Variable batch_norm_add_relu(const Variable& x, const Variable& z, const Variable& weight, const Variable& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                             double eps, const ChannelSums* sums, const Tensor& num_batches_tracked) {
  return batch_norm_act("batch_norm_add_relu", x, &z, weight, bias, running_mean, running_var, training, momentum,
                        eps, sums, num_batches_tracked);
}

Variable batch_norm_relu_max_pool2d(const Variable& x, const Variable& weight, const Variable& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    Size2d kernel, Size2d stride, Size2d padding, double momentum, double eps,
                                    const ChannelSums* sums, const Tensor& num_batches_tracked) {
  const char* op = "batch_norm_relu_max_pool2d";
  const Tensor tx = image_input(op, x);
  const PoolWindow window = pool_window(op, tx, kernel, stride, padding);
  const bool fused = training && tx.numel() > 0 && !tx.device().is_cpu() &&
                     backend::batch_norm_relu_max_pool_train.has(backend::kCuda) &&
                     backend::batch_norm_relu_max_pool_available(tx, window.params);
  if (!fused)
    return max_pool2d(batch_norm_relu(x, weight, bias, running_mean, running_var, training, momentum, eps, sums,
                                      num_batches_tracked),
                      kernel, stride, padding);
  BatchNormArgs args =
      batch_norm_args(op, tx, weight, bias, running_mean, running_var, training, momentum, eps, num_batches_tracked);
  const std::int64_t c = tx.size(1);
  const TensorOptions stats(kFloat32, tx.device());
  Tensor y = empty_in_format_of(window.out_shape, tx);
  Tensor save_mean = Tensor::empty({c}, stats), save_invstd = Tensor::empty({c}, stats);
  // Without sums, zero-element stand-ins (the kernel's arguments are all defined tensors).
  const bool with_sums = takes_sums(op, sums, tx, training);
  const Tensor none = with_sums ? Tensor() : Tensor::empty({0}, stats);
  const Tensor argmax = backend::batch_norm_relu_max_pool_train(
      window.params, tx, with_sums ? sums->sum : none, with_sums ? sums->sum_of_squares : none, args.w, args.b,
      static_cast<float>(eps), args.momentum, args.rm, args.rv, args.batches, y, save_mean, save_invstd);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(y);
  auto node = std::make_shared<BatchNormReluMaxPoolNode>();
  node->p = window.params;
  node->x = tx;
  node->y = y;
  node->argmax = argmax;
  node->weight = args.w;
  node->bias = args.b;
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(y, node);
}

}  // namespace dpl
