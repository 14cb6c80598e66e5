// BatchNormBase's synchronised training forward (BatchNormBase::synchronize_statistics): the
// batch statistics of every process's samples together, built from differentiable ops around one
// sum over the processes, whose backward is a sum over the processes too (every process's loss
// depends on every process's statistics).
#include <memory>
#include <vector>

#include "dpl/autograd/node.hpp"
#include "dpl/autograd/ops.hpp"
#include "dpl/nn/normalization.hpp"
#include "dpl/tensor/tensor_ops.hpp"

namespace dpl::nn {

namespace {

class CrossProcessSumNode final : public Node {
 public:
  std::shared_ptr<CrossProcessSum> sum;
  const char* name() const override { return "sync_batch_norm_statistics"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    // Every process reaches this node (the same model makes the same graph), so the collective
    // runs on every one of them whether or not this one needs the gradient.
    Tensor g = gy.contiguous().clone();
    sum->sum(g);
    if (!t[0].needed()) return;
    // The target is the 1-D float32 sums' gradient: beta 0 means it holds garbage.
    Tensor& target = *t[0].tensor;
    target.copy_(t[0].beta == 0.f ? g : target + g);
  }
};

// x summed over the processes (x float32, 1-D).
Variable summed_over_processes(const Variable& x, const std::shared_ptr<CrossProcessSum>& sum) {
  Tensor out = x.data().contiguous().clone();
  sum->sum(out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<CrossProcessSumNode>();
  node->sum = sum;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace

Variable BatchNormBase::normalize_synchronized(const Variable& x) {
  const std::int64_t c = num_features();
  DPL_CHECK(x.defined() && x.data().dim() == 4 && x.data().shape()[1] == c && is_float_dtype(x.dtype()),
            "BatchNorm (synchronised): expected a float input (N, ", c, ", H, W), got ",
            x.defined() ? ::dpl::detail::concat(x.dtype(), " of shape ", shape_str(x.data().shape())) : "an undefined Variable");
  const Shape& s = x.data().shape();
  const Shape per_channel{1, c, 1, 1};
  const Device device = x.data().device();
  const Variable xf = cast(x, kFloat32);
  // Sums of x - K and (x - K)^2 with K the running mean, the same on every process (the running
  // statistics are updated from the common statistics): E[x^2] - E[x]^2 cancels badly when the
  // mean is large against the spread, and K keeps the shifted mean near 0.
  const Tensor k = running_mean_.data().to(kFloat32).contiguous();
  const Variable shifted = sub(xf, Variable(k.reshape(per_channel)));
  const std::vector<std::int64_t> dims{0, 2, 3};
  const auto local_count = static_cast<float>(s[0] * s[2] * s[3]);
  const Variable local_count_var(Tensor::full({1}, local_count, TensorOptions(kFloat32, device)));
  const Variable sums =
      summed_over_processes(cat({sum(shifted, dims), sum(mul(shifted, shifted), dims), local_count_var}, 0), statistics_sum_);
  // The count stays on the device: reading it back would wait for the device in every layer of
  // every step. Only a local batch too small to guarantee 2 values per channel reads it.
  const Variable count = narrow(sums, 0, 2 * c, 1);
  if (local_count < 2.f) {
    const float n = count.data().to(Device::cpu()).item();
    DPL_CHECK(n >= 2.f, "BatchNorm (synchronised): training mode needs at least 2 values per channel over all ",
              "processes, got ", n);
  }
  const Variable shifted_mean = div(narrow(sums, 0, 0, c), count);
  const Variable var = sub(div(narrow(sums, 0, c, c), count), mul(shifted_mean, shifted_mean));  // biased, as normalising uses
  const Variable invstd = rsqrt(var + static_cast<float>(options_.eps()));
  Variable y = mul(sub(shifted, reshape(shifted_mean, per_channel)), reshape(invstd, per_channel));
  if (weight_.defined())
    y = add(mul(y, reshape(cast(weight_, kFloat32), per_channel)), reshape(cast(bias_, kFloat32), per_channel));

  // The running statistics, outside the graph: PyTorch's momentum rule with the unbiased variance.
  // Not again while a checkpoint recomputes this layer: the first run updated them.
  if (recomputing()) return cast(y, x.dtype());
  const auto momentum = static_cast<float>(options_.momentum());
  const Tensor mean = shifted_mean.data() + k;
  Tensor running_mean = running_mean_.data(), running_var = running_var_.data();
  running_mean.copy_((running_mean.to(kFloat32) * (1.f - momentum) + mean * momentum).to(running_mean.dtype()));
  const Tensor& n = count.data();
  // (C,) times (1,) on the device, outside the graph.
  const Tensor unbiased = mul(Variable(var.data()), Variable(n / (n - 1.f))).data();
  running_var.copy_((running_var.to(kFloat32) * (1.f - momentum) + unbiased * momentum).to(running_var.dtype()));
  count_batch();
  return cast(y, x.dtype());
}

}  // namespace dpl::nn
