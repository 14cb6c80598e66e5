#pragma once
// Normalisation layers: BatchNorm1d and BatchNorm2d over the batch, LayerNorm over each sample's last dimensions,
// GroupNorm over each sample's groups of channels.
//
// Under optim::MixedPrecision every parameter of a model is cast to the compute dtype (one arena,
// one dtype), the affine weights and biases of these layers too; their ops take 16-bit weight and
// bias beside a 16-bit input and widen them to float32 for the arithmetic, so a layer behaves the
// same as a float32 one apart from the parameters' rounding. Running statistics are buffers and
// stay float32.

#include <cstdint>
#include <memory>
#include <utility>

#include "dpl/autograd/ops/batch_norm.hpp"
#include "dpl/core/shape.hpp"

#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"
#include "dpl/nn/pooling.hpp"

namespace dpl::nn {

/// Settings of a BatchNorm1d or BatchNorm2d layer, as libtorch's BatchNormOptions:
/// `BatchNorm2dOptions(64).eps(1e-3).momentum(0.01).affine(false)`. The layer checks the values.
struct BatchNorm2dOptions {
  /// The options for num_features channels, every other setting at its default.
  explicit BatchNorm2dOptions(std::int64_t num_features) : num_features_(num_features) {}
  /// Channels C of the input; must be >= 1.
  DPL_ARG(std::int64_t, num_features);
  /// Added to the variance before its square root; must be > 0 (default 1e-5).
  DPL_ARG(double, eps) = 1e-5;
  /// Weight of the batch in the running statistics, in [0, 1] (default 0.1).
  DPL_ARG(double, momentum) = 0.1;
  /// Whether the layer has the learned weight and bias (default true).
  DPL_ARG(bool, affine) = true;
};
/// Settings of a BatchNorm1d layer: the same as BatchNorm2d's (libtorch has one BatchNormOptions).
using BatchNorm1dOptions = BatchNorm2dOptions;

/// Sums float32 tensors over the processes of a data-parallel job, in place: what a synchronised
/// BatchNorm needs of a communicator, so that nn does not depend on one
/// (parallel::convert_sync_batchnorm gives each BatchNorm of a model one over a communicator).
class CrossProcessSum {
 public:
  virtual ~CrossProcessSum() = default;
  /// buffer = the sum of every process's buffer (float32, contiguous, on the model's device).
  /// Collective: every process calls it in the same order.
  virtual void sum(Tensor& buffer) = 0;
  /// The number of processes.
  virtual int processes() const = 0;
};

/// What BatchNorm1d and BatchNorm2d share: the parameters, buffers and settings of batch
/// normalisation per channel. Parameters: weight (C,) = 1 and bias (C,) = 0 when affine. Buffers:
/// running_mean (C,) = 0, running_var (C,) = 1 and num_batches_tracked (int64, shape ()) = 0, all
/// moved by to() and broadcast with the parameters but never trained. In training mode (the
/// module's flag) a layer normalises with the batch statistics, updates the running ones with
/// `momentum` (PyTorch's convention: new = (1 - momentum) old + momentum batch, unbiased batch
/// variance; 0.1 by default) and counts the batch; in evaluation mode it normalises with the
/// running statistics.
class BatchNormBase : public Module {
 public:
  /// The affine parameters (undefined without affine).
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  /// The running statistics and the count of training batches (the buffers' current tensors).
  Tensor running_mean() const { return running_mean_.data(); }
  Tensor running_var() const { return running_var_.data(); }
  Tensor num_batches_tracked() const { return num_batches_tracked_.data(); }
  /// The channel count C that inputs must have.
  std::int64_t num_features() const { return options_.num_features(); }
  /// The settings the layer was built with.
  const BatchNorm2dOptions& options() const { return options_; }
  /// Synchronised batch statistics (PyTorch's SyncBatchNorm, ChainerMN's
  /// MultiNodeBatchNormalization): in training mode the layer normalises with the mean and
  /// variance of every process's batch together, so that p processes of b samples normalise as
  /// one of p*b, and its running statistics follow those (equal on every process). One sum of
  /// 2C+1 floats over the processes forward (the per-channel sums of x and x^2, shifted by the
  /// running mean for accuracy, and the count) and one backward; computed in float32 for every
  /// dtype and returned in x's dtype, contiguous. Null, or one process: this process's batch
  /// alone (the default, through the fused kernels). Evaluation mode is unchanged.
  void synchronize_statistics(std::shared_ptr<CrossProcessSum> sum) { statistics_sum_ = std::move(sum); }
  /// Whether training-mode statistics are summed over more than one process.
  bool synchronizes_statistics() const { return statistics_sum_ != nullptr && statistics_sum_->processes() > 1; }

 protected:
  /// Registers the parameters and buffers. Requires num_features >= 1, eps > 0 and momentum in
  /// [0, 1]; throws dpl::Error naming `layer` otherwise.
  BatchNormBase(const char* layer, const BatchNorm2dOptions& options);
  /// dpl::batch_norm of a 4-D x with this layer's state (and x's sums, when given), counting a
  /// training batch.
  Variable normalize(const Variable& x, const ChannelSums* sums = nullptr);
  /// Counts a training batch in num_batches_tracked, except while a checkpoint recomputes the
  /// layer (recomputing()): the first run counted it. For the synchronised statistics; the other
  /// forward variants hand num_batches_tracked to their op, which counts it with the running
  /// statistics (in the same kernel where the device can).
  void count_batch();
  /// The running statistic a forward variant passes to its op: none while a checkpoint recomputes
  /// the layer in training, so that the batch's statistics normalise without updating it (or the
  /// batch count) again.
  Tensor running(const Variable& statistic) const;

  /// The synchronised training forward of a 4-D x (see synchronize_statistics), counting the batch.
  Variable normalize_synchronized(const Variable& x);

  BatchNorm2dOptions options_;
  Variable weight_, bias_;
  Variable running_mean_, running_var_, num_batches_tracked_;
  std::shared_ptr<CrossProcessSum> statistics_sum_;
};

/// Batch normalisation of (N, C, H, W) images per channel (see dpl::batch_norm and BatchNormBase
/// for the parameters, buffers and modes).
class BatchNorm2d : public BatchNormBase {
 public:
  /// Requires num_features >= 1, eps > 0 and momentum in [0, 1]; throws dpl::Error otherwise.
  explicit BatchNorm2d(const BatchNorm2dOptions& options);
  /// BatchNorm2d(BatchNorm2dOptions(num_features).eps(eps).momentum(momentum).affine(affine)).
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  /// Requires x (N, num_features, H, W) of a float dtype; returns x's shape, dtype and format.
  Variable forward(const Variable& x) override;
  /// forward(x) with x's ChannelSums, as Conv2d::forward_with_sums gives them with its output:
  /// in training mode the statistics come from them where dpl::batch_norm takes them (saving a
  /// pass over x). Null or undefined sums: forward(x). Ignored when the statistics are
  /// synchronised over processes.
  Variable forward_from_sums(const Variable& x, const ChannelSums* sums);
  /// relu(forward(x)) through dpl::batch_norm_relu, one pass where the device's library fuses it.
  /// Same requirements and effects on the running statistics as forward(); `sums` as there.
  Variable forward_relu(const Variable& x, const ChannelSums* sums = nullptr);
  /// relu(forward(x) + residual) through dpl::batch_norm_add_relu (the end of a residual block),
  /// one pass where the device's library fuses it. Requires residual of x's shape and dtype;
  /// otherwise as forward(); `sums` as there.
  Variable forward_add_relu(const Variable& x, const Variable& residual, const ChannelSums* sums = nullptr);
  /// max_pool2d(relu(forward(x))) over pool's windows through dpl::batch_norm_relu_max_pool2d (a
  /// network's stem), one pass where the device fuses it. Requires what forward() and max_pool2d
  /// require; `sums` as there.
  Variable forward_relu_max_pool(const Variable& x, const MaxPool2dOptions& pool, const ChannelSums* sums = nullptr);
};

/// Batch normalisation (PyTorch's nn.BatchNorm1d) of (N, C) features or (N, C, L) sequences per
/// channel, over N (and L): dpl::batch_norm of the input viewed as (N, C, L, 1), so the kernels,
/// parameters, buffers and modes are BatchNorm2d's (see BatchNormBase).
class BatchNorm1d : public BatchNormBase {
 public:
  /// Requires num_features >= 1, eps > 0 and momentum in [0, 1]; throws dpl::Error otherwise.
  explicit BatchNorm1d(const BatchNorm1dOptions& options);
  /// BatchNorm1d(BatchNorm1dOptions(num_features).eps(eps).momentum(momentum).affine(affine)).
  explicit BatchNorm1d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  /// Requires x (N, num_features) or (N, num_features, L) of a float dtype, and in training mode
  /// at least 2 values per channel (N * L >= 2); returns x's shape and dtype, contiguous.
  Variable forward(const Variable& x) override;
};

/// Settings of a LayerNorm layer, as libtorch's LayerNormOptions:
/// `LayerNormOptions({768}).eps(1e-6).elementwise_affine(false)`. The layer checks the values.
struct LayerNormOptions {
  /// The options for normalized_shape, every other setting at its default.
  /* implicit */ LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  /// The normalised trailing extents of the input (non-empty, every extent >= 1).
  DPL_ARG(Shape, normalized_shape);
  /// Added to the variance before its square root; must be > 0 (default 1e-5).
  DPL_ARG(double, eps) = 1e-5;
  /// Whether the layer has the learned per-element weight (and bias, see below) (default true).
  DPL_ARG(bool, elementwise_affine) = true;
  /// Whether the layer has the bias when elementwise_affine (default true; PyTorch's bias=False).
  DPL_ARG(bool, bias) = true;
};

/// Layer normalisation (PyTorch's nn.LayerNorm, see dpl::layer_norm): each slice of the input
/// over its last dimensions, which must equal normalized_shape, is normalised by its own mean and
/// biased variance, then scaled and shifted element by element. Parameters, when
/// elementwise_affine: weight (normalized_shape) = 1 and, with bias, bias (normalized_shape) = 0,
/// in that order; no buffers. Training and evaluation compute the same.
class LayerNorm : public Module {
 public:
  /// Requires a non-empty normalized_shape of extents >= 1 and eps > 0; throws dpl::Error
  /// otherwise.
  explicit LayerNorm(const LayerNormOptions& options);
  /// Requires x of a float dtype whose last dimensions are normalized_shape; returns a contiguous
  /// tensor of x's shape and dtype.
  Variable forward(const Variable& x) override;
  /// The affine parameters (each undefined when the layer has none).
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  /// The settings the layer was built with.
  const LayerNormOptions& options() const { return options_; }

 private:
  LayerNormOptions options_;
  Variable weight_, bias_;
};

/// Settings of a GroupNorm layer, as libtorch's GroupNormOptions:
/// `GroupNormOptions(32, 256).eps(1e-6).affine(false)`. The layer checks the values.
struct GroupNormOptions {
  /// The options for num_groups groups of num_channels channels, every other setting at its
  /// default.
  GroupNormOptions(std::int64_t num_groups, std::int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  /// Groups the channels are divided into; must be >= 1 and divide num_channels.
  DPL_ARG(std::int64_t, num_groups);
  /// Channels C of the input; must be >= 1.
  DPL_ARG(std::int64_t, num_channels);
  /// Added to the variance before its square root; must be > 0 (default 1e-5).
  DPL_ARG(double, eps) = 1e-5;
  /// Whether the layer has the learned per-channel weight and bias (default true).
  DPL_ARG(bool, affine) = true;
};

/// Group normalisation (PyTorch's nn.GroupNorm, see dpl::group_norm) of (N, C, *) inputs: each
/// sample's group of C / num_groups consecutive channels is normalised by its own mean and biased
/// variance, then every channel scaled and shifted. Parameters, when affine: weight (C,) = 1 and
/// bias (C,) = 0; no buffers. Training and evaluation compute the same.
class GroupNorm : public Module {
 public:
  /// Requires num_channels >= 1, num_groups >= 1 dividing it, and eps > 0; throws dpl::Error
  /// otherwise.
  explicit GroupNorm(const GroupNormOptions& options);
  /// Requires x (N, num_channels, *) of a float dtype; returns a contiguous tensor of x's shape
  /// and dtype.
  Variable forward(const Variable& x) override;
  /// The affine parameters (undefined without affine).
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  /// The settings the layer was built with.
  const GroupNormOptions& options() const { return options_; }

 private:
  GroupNormOptions options_;
  Variable weight_, bias_;
};

}  // namespace dpl::nn
