#pragma once
// GradientReducer: the communication of data-parallel training over one model's flat arenas.

#include <cstdint>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::parallel {

/// Keeps the ranks' copies of one model in step: once, every rank takes rank 0's parameters;
/// every step, every rank's gradients become their mean over all ranks. Each is one collective
/// over the model's flat arena (nn::ParameterArena), never a loop over parameters.
///
/// Requires the model and the communicator to outlive the reducer, and every rank to make the
/// same calls in the same order (they are collective over the communicator).
class GradientReducer {
 public:
  /// A reducer for model over comm. Communicates nothing.
  GradientReducer(nn::Module& model, comm::Communicator& comm);

  /// Every rank's parameters and buffers = rank 0's (one broadcast of the parameter arena, one per
  /// buffer). First checks that every rank's model has the same parameters and buffers (names,
  /// shapes, dtypes, in order); if not, every rank throws the same dpl::Error naming the ranks
  /// that differ from rank 0 and their first differing entry, and nothing is broadcast. Ensures
  /// needs_broadcast() is false after.
  void broadcast_parameters();

  /// Every rank's gradients = their mean over all ranks: one allreduce (kMean) of the gradient
  /// arena, carried in the communicator's CommOptions::allreduce_dtype (a 16-bit type needs the
  /// arena on a GPU and an NCCL communicator, else dpl::Error). Requires a float32 arena: a
  /// model cast to 16 bits is reduced through its optimizer's float32 master gradients (the
  /// overload below, which MultiNodeOptimizer calls). With one rank, or no parameters,
  /// nothing is communicated. Requires the same model on every rank (broadcast_parameters checks
  /// it). The padding between parameters is zero on every rank, so it stays zero.
  void allreduce_gradients();

  /// As allreduce_gradients(), over the buffers an optimizer's prepare_gradients() returned
  /// instead of the arena's gradients: buffers[0] holds the gradients (float32, the arena's
  /// element count: MixedPrecision's master gradients of a 16-bit model) and is carried in
  /// CommOptions::allreduce_dtype; the others (a one-element non-finite or overflow flag) are averaged in
  /// float32, before the gradients, so that last_phases() describes the gradients' allreduce.
  /// Requires at least one buffer, each float32 and contiguous on the arena's device.
  void allreduce_gradients(const std::vector<Tensor>& buffers);

  /// True until broadcast_parameters() has run on the model's current arena, and again once the
  /// model repacks it (a parameter added, or data replaced): then the ranks must be checked and
  /// brought back in step before the next allreduce_gradients().
  bool needs_broadcast();

  /// The sub-phases of the last allreduce_gradients() (empty when it communicated nothing, or
  /// for single-step algorithms); see comm::Communicator::last_phases.
  const std::vector<comm::SubPhase>& last_phases() const;

  /// The model whose arenas this reducer communicates.
  nn::Module& model() const { return model_; }
  /// The communicator this reducer runs its collectives on.
  comm::Communicator& communicator() const { return comm_; }

 private:
  nn::Module& model_;
  comm::Communicator& comm_;
  std::uint64_t broadcast_arena_ = 0;  // id of the arena last checked and broadcast (0: none)
  bool communicated_ = false;          // whether the last allreduce_gradients() called the communicator
};

/// One-off GradientReducer(model, comm).broadcast_parameters(), for programs that drive the
/// collectives themselves.
void broadcast_parameters(nn::Module& model, comm::Communicator& comm);
/// One-off GradientReducer(model, comm).allreduce_gradients().
void allreduce_gradients(nn::Module& model, comm::Communicator& comm);

}  // namespace dpl::parallel
