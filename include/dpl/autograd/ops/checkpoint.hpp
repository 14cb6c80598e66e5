#pragma once
// Activation checkpointing (PyTorch's torch.utils.checkpoint): a part of the forward pass whose
// intermediate results are not kept for backward but computed again when backward reaches it,
// trading that part's forward compute once more for the memory its saved activations took.
// Part of dpl/autograd/ops.hpp.

#include <functional>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/random.hpp"

namespace dpl {

/// The function a checkpoint runs: its result from the checkpoint's inputs, in order.
using CheckpointFunction = std::function<Variable(const std::vector<Variable>&)>;

/// fn(inputs), keeping for backward only the values of `inputs` instead of what fn's ops save.
/// When backward reaches the result, fn runs again on those values (as new leaves), recording
/// its ops this time, and the result's gradient flows back through that recomputation to
/// `inputs` and to every variable fn reads that requires a gradient (a module's parameters).
///
/// - fn must compute the same result from the same inputs. The generators in `replay` (default:
///   the process-wide one, which Dropout layers use unless given another) are set back for the
///   recomputation to their state when fn first ran, so dropout draws the same masks, and are
///   returned to their current state afterwards. Generators fn uses that are not listed advance
///   again and draw other values.
/// - While fn runs again, recomputing() is true: batch normalisation then normalises with the
///   batch's statistics as in the first run, but leaves its running statistics and its batch
///   count alone, which the first run updated.
/// - A parameter's gradient-ready hooks (data-parallel overlap) run in the recomputation's
///   backward, once its gradient there is final. A parameter read both inside fn and outside it
///   gets its gradient in two backward passes, and its hooks run in each.
/// - Memory: the first run records fn's ops as any forward pass does and frees them when fn
///   returns, so the peak of one checkpointed part is the same as without checkpointing; what
///   the rest of the forward pass holds until backward is the inputs' values instead.
///
/// Without gradient recording (NoGradGuard), or when the result does not require a gradient
/// (nothing fn read does), this is fn(inputs) and nothing is kept. Throws dpl::Error for an empty
/// fn or an undefined input, when fn returns an undefined variable, and when the recomputation's
/// result differs in shape, dtype or device from the first run's.
Variable checkpoint(const CheckpointFunction& fn, const std::vector<Variable>& inputs,
                    const std::vector<Generator*>& replay = {&default_generator()});

/// checkpoint of a function of one input.
Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& input,
                    const std::vector<Generator*>& replay = {&default_generator()});

/// True while a checkpoint is computing its function again during backward, on this thread.
bool recomputing();

}  // namespace dpl
