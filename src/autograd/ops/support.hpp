#pragma once
// What the op families share: the operand checks, the memory-format rules and the ways a node
// writes an input's gradient into its target.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/autograd/node.hpp"
#include "dpl/autograd/ops.hpp"

namespace dpl::ops_detail {

// --- operand checks ---------------------------------------------------------------------------

/// One float operand of an op, as its error messages name it: `name` with its article ("an
/// input", "the second operand"), `layout` what its dimensions mean (" (N, C, H, W)" or ""), and
/// the rank it must have (-1: any).
struct Operand {
  const Variable& var;
  const char* name;
  std::int64_t rank = -1;
  const char* layout = "";
};

/// Checks every operand of `op`: defined, of a float dtype, of its rank, and of the first
/// operand's dtype and device. Throws dpl::Error naming the op, the operand, what was expected
/// and what came.
void check_operands(const char* op, std::initializer_list<Operand> operands);

/// Checks that t (named `name`, e.g. "labels") is on `like`'s device, named `like_name`.
void check_same_device(const char* op, const Tensor& like, const char* like_name, const Tensor& t,
                       const char* name);

// --- tensors the ops make ---------------------------------------------------------------------

/// An uninitialised contiguous tensor of `shape` in like's dtype and on like's device.
Tensor empty_on(const Shape& shape, const Tensor& like);
/// t as a flat row-major array: ops that index rows (matmul, softmax, reshape) read them so.
inline Tensor dense(const Tensor& t) { return t.contiguous(); }
/// The one float input of a single-input op, checked, dense in its own memory format.
Tensor float_input(const char* op, const Variable& x);
/// x checked as a float (N, C, H, W) image, dense in its own memory format (kernels take both).
Tensor image_input(const char* op, const Variable& x);
/// The window of a 2-D pooling of image tx, checked (a stride of 0 in both dimensions: the
/// kernel's extent), and the output shape it gives: floor((H + 2 pad - kernel) / stride) + 1.
struct PoolWindow {
  backend::Pool2dParams params;
  Shape out_shape;
};
PoolWindow pool_window(const char* op, const Tensor& tx, Size2d kernel, Size2d stride, Size2d padding);

// --- memory formats ---------------------------------------------------------------------------
// A dense tensor is stored contiguous (row-major, NCHW for images) or channels-last (NHWC), as
// Tensor::memory_format says. Elementwise ops work in memory order, so they keep their input's
// format: a channels-last network stays channels-last without copies. Autograd gives every
// gradient buffer the format of its variable's data (Tensor::empty_like), so a node's incoming
// gradient has the format of the node's output. Where an op computed in another format than an
// input's (operands in two formats, a row broadcast, reshape), that input's gradient goes
// through write_in.

/// True when t is dense in format f (a tensor may be both).
bool has_format(const Tensor& t, MemoryFormat f);
/// t in format f: t itself when it already is, else a copy.
Tensor in_format(const Tensor& t, MemoryFormat f);
/// t itself when it is dense in either format, else a contiguous copy.
inline Tensor dense_keep(const Tensor& t) { return in_format(t, t.memory_format()); }
/// An uninitialised tensor of `shape` in format f with like's dtype and device.
Tensor empty_in(const Shape& shape, MemoryFormat f, const Tensor& like);
/// An uninitialised tensor of `shape` in like's dtype, device and memory format.
inline Tensor empty_in_format_of(const Shape& shape, const Tensor& like) {
  return empty_in(shape, like.memory_format(), like);
}

// --- gradient writes --------------------------------------------------------------------------

/// What the fused batch norm + residual add + ReLU asks of the op that completes its output's
/// gradient (GradTarget::completes): to mask that gradient by y > 0 and reduce it per channel
/// where it is completed (conv2d_backward_data_masked_sums), so that the batch norm's backward
/// skips its own reduction pass over it and passes it on as the residual's gradient.
struct OutputGradReductions {
  Tensor y, x, mean;     // the batch norm's output (the ReLU's mask), its input, the batch mean
  Tensor sum_g, sum_gx;  // float32 (C,): filled by the completing op
  bool filled = false;   // set by the op that filled them (and masked the gradient)
};

/// How many times, in this process, an op has filled an OutputGradReductions (what tests read to
/// see that the hand-off ran), and the op's call that counts one.
std::uint64_t output_grad_reductions_filled();
void count_output_grad_reductions_filled();

/// A node that offers OutputGradReductions for its output.
class OffersOutputGradReductions {
 public:
  virtual ~OffersOutputGradReductions() = default;
  virtual std::shared_ptr<OutputGradReductions> output_grad_reductions() const = 0;
};

/// target = beta*target + g for g of the target's shape, whatever the two formats.
void add_into(const Tensor& g, GradTarget& target);

/// add_into for an op that hands its own output gradient, in the input's shape, to an input
/// (reshape, squeeze, an expand that repeats nothing, both operands of add): g becomes the buffer
/// when the target is replaceable and g has the buffer's strides, dtype and device (or, for an
/// unallocated target, its layout), else it is added in. g may go to several targets (the engine
/// copies a shared buffer before anything adds into it); the op must not write into g afterwards.
void pass_into(const Tensor& g, GradTarget& target);

/// Runs `kernel(beta, out)`, a kernel that writes in format f, into target's buffer when the
/// buffer has that format, else into a temporary that add_into then brings to the buffer.
template <typename Kernel>
void write_in(GradTarget& target, MemoryFormat f, Kernel&& kernel) {
  Tensor& buffer = *target.tensor;
  if (has_format(buffer, f)) {
    kernel(target.beta, buffer);
    return;
  }
  Tensor tmp = empty_in(buffer.shape(), f, buffer);
  kernel(0.f, tmp);
  add_into(tmp, target);
}

/// dim in [-rank, rank) as a dimension index in [0, rank); throws dpl::Error naming op otherwise.
std::int64_t wrap_dim(const char* op, std::int64_t dim, std::int64_t rank);

/// inputs without the undefined ones (an optional bias), in order: the inputs a node lists.
std::vector<Variable> defined_inputs(std::initializer_list<const Variable*> inputs);

}  // namespace dpl::ops_detail
