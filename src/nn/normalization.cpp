#include "dpl/nn/normalization.hpp"

#include "backend/kernels.hpp"
#include "dpl/autograd/ops.hpp"

namespace dpl::nn {

BatchNormBase::BatchNormBase(const char* layer, const BatchNorm2dOptions& options) : options_(options) {
  const std::int64_t num_features = options.num_features();
  const double eps = options.eps(), momentum = options.momentum();
  DPL_CHECK(num_features >= 1, layer, ": expected num_features >= 1, got ", num_features);
  DPL_CHECK(eps > 0.0, layer, ": expected eps > 0, got ", eps);
  DPL_CHECK(momentum >= 0.0 && momentum <= 1.0, layer, ": expected momentum in [0, 1], got ", momentum);
  if (options.affine()) {
    weight_ = register_parameter("weight", Tensor::ones({num_features}));
    bias_ = register_parameter("bias", Tensor::zeros({num_features}));
  }
  running_mean_ = register_buffer("running_mean", Tensor::zeros({num_features}));
  running_var_ = register_buffer("running_var", Tensor::ones({num_features}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros({}, TensorOptions(kInt64)));
}

Variable BatchNormBase::normalize(const Variable& x, const ChannelSums* sums) {
  if (is_training() && synchronizes_statistics()) return normalize_synchronized(x);
  return batch_norm(x, weight_, bias_, running(running_mean_), running(running_var_), is_training(),
                    options_.momentum(), options_.eps(), sums, num_batches_tracked_.data());
}

Tensor BatchNormBase::running(const Variable& statistic) const {
  return is_training() && recomputing() ? Tensor() : statistic.data();
}

void BatchNormBase::count_batch() {
  if (!is_training() || recomputing()) return;
  Tensor count = num_batches_tracked_.data();
  backend::increment_count(count);
}

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options) : BatchNormBase("BatchNorm2d", options) {}

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, double momentum, bool affine)
    : BatchNorm2d(BatchNorm2dOptions(num_features).eps(eps).momentum(momentum).affine(affine)) {}

Variable BatchNorm2d::forward(const Variable& x) { return normalize(x); }

Variable BatchNorm2d::forward_from_sums(const Variable& x, const ChannelSums* sums) { return normalize(x, sums); }

Variable BatchNorm2d::forward_relu(const Variable& x, const ChannelSums* sums) {
  if (is_training() && synchronizes_statistics()) return relu(normalize_synchronized(x));
  return batch_norm_relu(x, weight_, bias_, running(running_mean_), running(running_var_), is_training(),
                         options_.momentum(), options_.eps(), sums, num_batches_tracked_.data());
}

Variable BatchNorm2d::forward_add_relu(const Variable& x, const Variable& residual, const ChannelSums* sums) {
  if (is_training() && synchronizes_statistics()) return relu(add(normalize_synchronized(x), residual));
  return batch_norm_add_relu(x, residual, weight_, bias_, running(running_mean_), running(running_var_),
                             is_training(), options_.momentum(), options_.eps(), sums, num_batches_tracked_.data());
}

Variable BatchNorm2d::forward_relu_max_pool(const Variable& x, const MaxPool2dOptions& pool, const ChannelSums* sums) {
  // Synchronized statistics have no fused stem: forward_relu's synchronized path, then the pooling.
  if (is_training() && synchronizes_statistics())
    return max_pool2d(forward_relu(x, sums), pool.kernel_size(), pool.stride(), pool.padding());
  return batch_norm_relu_max_pool2d(x, weight_, bias_, running(running_mean_), running(running_var_), is_training(),
                                    pool.kernel_size(), pool.stride(), pool.padding(), options_.momentum(),
                                    options_.eps(), sums, num_batches_tracked_.data());
}

BatchNorm1d::BatchNorm1d(const BatchNorm1dOptions& options) : BatchNormBase("BatchNorm1d", options) {}

BatchNorm1d::BatchNorm1d(std::int64_t num_features, double eps, double momentum, bool affine)
    : BatchNorm1d(BatchNorm1dOptions(num_features).eps(eps).momentum(momentum).affine(affine)) {}

Variable BatchNorm1d::forward(const Variable& x) {
  const std::int64_t c = num_features();
  DPL_CHECK(x.defined(), "BatchNorm1d: expected an input (N, ", c, ") or (N, ", c, ", L), got an undefined Variable");
  const Shape& s = x.shape();
  DPL_CHECK((s.size() == 2 || s.size() == 3) && s[1] == c, "BatchNorm1d: expected an input (N, ", c, ") or (N, ", c,
            ", L), got shape ", shape_str(s));
  const std::int64_t length = s.size() == 3 ? s[2] : 1;
  DPL_CHECK(!is_training() || s[0] * length >= 2, "BatchNorm1d: training mode needs at least 2 values per channel",
            " (N*L), got shape ", shape_str(s));
  return reshape(normalize(reshape(x, {s[0], c, length, 1})), s);
}

}  // namespace dpl::nn

namespace dpl::nn {

LayerNorm::LayerNorm(const LayerNormOptions& options) : options_(options) {
  const Shape& shape = options.normalized_shape();
  DPL_CHECK(!shape.empty(), "LayerNorm: expected a non-empty normalized_shape, got ()");
  for (std::int64_t e : shape)
    DPL_CHECK(e >= 1, "LayerNorm: expected a normalized_shape of extents >= 1, got ", shape_str(shape));
  DPL_CHECK(options.eps() > 0.0, "LayerNorm: expected eps > 0, got ", options.eps());
  if (!options.elementwise_affine()) return;
  weight_ = register_parameter("weight", Tensor::ones(shape));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::zeros(shape));
}

Variable LayerNorm::forward(const Variable& x) {
  return layer_norm(x, options_.normalized_shape(), weight_, bias_, options_.eps());
}

GroupNorm::GroupNorm(const GroupNormOptions& options) : options_(options) {
  const std::int64_t groups = options.num_groups(), channels = options.num_channels();
  DPL_CHECK(channels >= 1, "GroupNorm: expected num_channels >= 1, got ", channels);
  DPL_CHECK(groups >= 1 && channels % groups == 0, "GroupNorm: expected num_groups >= 1 dividing num_channels ",
            channels, ", got ", groups);
  DPL_CHECK(options.eps() > 0.0, "GroupNorm: expected eps > 0, got ", options.eps());
  if (!options.affine()) return;
  weight_ = register_parameter("weight", Tensor::ones({channels}));
  bias_ = register_parameter("bias", Tensor::zeros({channels}));
}

Variable GroupNorm::forward(const Variable& x) {
  const std::int64_t c = options_.num_channels();
  DPL_CHECK(x.defined() && x.shape().size() >= 2 && x.shape()[1] == c, "GroupNorm: expected an input (N, ", c,
            ", *), got ", x.defined() ? shape_str(x.shape()) : "an undefined Variable");
  return group_norm(x, options_.num_groups(), weight_, bias_, options_.eps());
}

}  // namespace dpl::nn
