#pragma once
// Node: one recorded op in the graph. Public so that users can add their own differentiable ops.

#include <memory>
#include <string>
#include <vector>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Where an op writes the gradient of one input during backward.
struct GradTarget {
  /// The input's gradient buffer (shape, dtype and device of the input's data).
  Tensor* tensor = nullptr;
  /// 0: overwrite the buffer (it holds garbage); 1: add to it (it holds earlier contributions).
  float beta = 0.f;
  /// Set by the engine when `tensor` is a fresh buffer (beta 0) for the gradient of an
  /// intermediate result that nothing else holds: an op whose input gradient is its output
  /// gradient in another shape (reshape, squeeze) may then make that gradient tensor the buffer
  /// instead of copying it. Never set for a leaf's gradient.
  bool replaceable = false;
  /// Set, for a node that adopts its gradient buffers (Node::adopts_gradient_buffers), on a
  /// replaceable target instead of allocating it: *tensor is still undefined, and backward must
  /// define it, with a tensor it already holds that fits() or with allocate(). An op that can hand
  /// over a buffer (a reshape, an add passing its gradient to both operands, a loss that turns its
  /// saved logits into their gradient) then never costs a second one, not even for a moment.
  bool unallocated = false;
  /// The layout a buffer of an unallocated target must have: the input's shape, dtype, device and
  /// memory format.
  Shape shape;
  TensorOptions options;
  MemoryFormat format = MemoryFormat::kContiguous;
  /// Set by the engine when this is the last contribution the input's gradient receives in this
  /// backward pass (every other op that used the input has run, and the input is the result of an
  /// op, not a leaf): what the op writes or adds completes that gradient. An op may then also
  /// compute what the input's own op would otherwise derive from the complete gradient in a pass
  /// of its own (a batch norm's reductions).
  bool completes = false;
  /// False when the input needs no gradient; then tensor is null and nothing is written.
  bool needed() const { return tensor != nullptr; }
  /// Whether t has the layout of this unallocated target's buffer (and may become it).
  bool fits(const Tensor& t) const;
  /// Makes *tensor a new, uninitialised buffer of the layout (an unallocated target whose buffer
  /// is not defined yet) and returns it.
  Tensor& allocate();
};

/// A recorded op. The forward function creates a Node subclass, stores whatever backward needs
/// (inputs via set_inputs, saved tensors as members) and returns Variable::make_result(out, node).
///
/// backward must read values only from its saved members, never from inputs()[i].data(): the
/// graph drops the value of an op's result as soon as no handle outside the graph holds it (the
/// ops that need it saved it), so that a forward pass keeps alive only what backward reads.
class Node {
 public:
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  virtual ~Node();
  /// The op's name, used in error messages.
  virtual const char* name() const = 0;
  /// Given the gradient of the output, writes or adds the gradient of each input i into
  /// targets[i] (honouring its beta) when targets[i].needed(). grad_output is read-only: it may
  /// also be the gradient buffer of other variables (an op that adopts its buffers may hand one
  /// tensor to several inputs; the engine copies such a buffer before anything adds into it).
  virtual void backward(const Tensor& grad_output, std::vector<GradTarget>& targets) = 0;
  /// Frees what backward needed (called by the engine once this node has run).
  virtual void release() {}
  /// True for a node whose backward defines its fresh intermediate gradient buffers itself (see
  /// GradTarget::unallocated); the engine then does not allocate them first.
  virtual bool adopts_gradient_buffers() const { return false; }

  const std::vector<Variable>& inputs() const { return inputs_; }
  void set_inputs(std::vector<Variable> inputs);
  void clear_inputs();

  /// The variable this node produced (set by Variable::make_result; weak, to avoid a cycle).
  const std::weak_ptr<VariableImpl>& output() const { return output_; }
  void set_output(std::weak_ptr<VariableImpl> out) { output_ = std::move(out); }

 private:
  std::vector<Variable> inputs_;
  std::weak_ptr<VariableImpl> output_;
};

/// True when any of the variables requires a gradient and gradient recording is on: an op
/// records a node exactly then.
bool any_requires_grad(std::initializer_list<const Variable*> vars);

}  // namespace dpl
