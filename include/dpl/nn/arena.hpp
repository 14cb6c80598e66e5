#pragma once
// Flat arenas: every parameter of a model is a view into one contiguous buffer, and every
// gradient a view into a second one, so that communication and optimizer updates are one call
// over the whole model.

#include <string>
#include <vector>

#include "dpl/autograd/variable.hpp"

namespace dpl::nn {

/// One parameter's place in the arenas.
struct ArenaEntry {
  std::string name;
  Shape shape;
  std::int64_t offset = 0;  // first element of this parameter in both arenas
  std::int64_t numel = 0;
};

/// The parameter and gradient arenas of one model, on one device, in one float dtype: float32, or
/// bfloat16/float16 for a model that optim::MixedPrecision has cast (its float32 master copy then
/// lives with the optimizer, in an arena of the same layout).
///
/// A parameter keeps its memory format in the arena: a channels-last convolution weight (after
/// nn::to_channels_last) is stored channels-last in its slot, so convolutions read it without a
/// copy; whole-arena operations do not care about the order within a slot.
///
/// Each parameter starts on a 16-element boundary (64 bytes in float32), so arenas of one model in
/// different dtypes have the same offsets; the gaps between parameters are zero in both arenas
/// and stay zero under every optimizer, so whole-arena operations need no mask.
class ParameterArena {
 public:
  /// Packs the given parameters (in the given order) into fresh arenas: copies each value (and
  /// each gradient a parameter already has) in, then rebinds each Variable's data and gradient to
  /// views of the arenas. Other gradients start at zero. All parameters must have one float dtype
  /// (float32, bfloat16 or float16) and one device; both arenas get that dtype.
  static ParameterArena pack(const std::vector<std::pair<std::string, Variable>>& named_parameters);

  ParameterArena() = default;

  /// The parameter values, 1-D.
  const Tensor& params() const { return params_; }
  /// The gradients, 1-D, the same layout as params().
  const Tensor& grads() const { return grads_; }
  const std::vector<ArenaEntry>& entries() const { return entries_; }
  /// Elements in each arena (padding included).
  std::int64_t numel() const { return params_.defined() ? params_.numel() : 0; }
  /// Bytes of each arena (padding included); the L of the allreduce for a float32 arena.
  std::size_t nbytes() const { return params_.defined() ? params_.nbytes() : 0; }
  Device device() const { return params_.device(); }
  /// The dtype of both arenas (float32 for an empty arena).
  DType dtype() const { return params_.defined() ? params_.dtype() : DType::kFloat32; }
  /// A number unique to each pack() in this process: equal ids mean the same layout and buffers.
  std::uint64_t id() const { return id_; }
  /// Sets every gradient to zero (one fill over the gradient arena).
  void zero_grads();
  /// True when each variable still views this arena at its entry (names and order equal).
  bool binds(const std::vector<std::pair<std::string, Variable>>& named_parameters) const;

 private:
  Tensor params_;
  Tensor grads_;
  std::vector<ArenaEntry> entries_;
  std::uint64_t id_ = 0;
};

/// Elements each parameter is aligned to in the arenas.
inline constexpr std::int64_t kArenaAlignment = 16;

}  // namespace dpl::nn
