#pragma once
// Variable: a tensor that remembers how it was computed, so that backward() can find gradients.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dpl/tensor/tensor.hpp"

namespace dpl {

class Node;
struct VariableImpl;

/// A handle to a value in the define-by-run graph. Copies share the same value and gradient.
/// A leaf (created by the user, requires_grad on) collects its gradient in grad(); a result of an
/// op on variables that require gradients remembers the op (its creator) until backward() runs.
class Variable {
 public:
  /// An undefined variable.
  Variable() = default;
  Variable(const Variable&) = default;
  Variable(Variable&&) noexcept = default;
  Variable& operator=(const Variable& other);
  Variable& operator=(Variable&& other) noexcept;
  /// Dropping the last handle outside the graph to an op's result frees its value (see Node).
  ~Variable();
  /// A leaf holding data.
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  /// Replaces the value (shape may change); the gradient is dropped.
  void set_data(Tensor data);
  /// The accumulated gradient; undefined until a backward pass reaches this variable.
  const Tensor& grad() const;
  /// Sets the gradient buffer (it must match data's shape, dtype and device). Parameters use this
  /// to put their gradients into the model's gradient arena.
  void set_grad(Tensor grad);
  /// Drops the gradient (a later backward writes a fresh one).
  void clear_grad();
  /// A process-wide count of set_data, set_grad and clear_grad calls on any variable. Caches of
  /// views into variables' buffers (a Module's arenas) compare it to learn, with one load, that
  /// no buffer was replaced since they were built.
  static std::uint64_t rebind_count();

  bool requires_grad() const;
  void set_requires_grad(bool on);
  /// True when no op created this variable (the user did).
  bool is_leaf() const;
  /// The op that created this variable, or null for a leaf.
  const std::shared_ptr<Node>& creator() const;

  const Shape& shape() const { return data().shape(); }
  std::int64_t numel() const { return data().numel(); }
  Device device() const { return data().device(); }
  DType dtype() const { return data().dtype(); }
  /// The value of a one-element variable, on the host.
  float item() const { return data().item(); }

  /// Adds a hook that each backward() reaching this leaf runs once the leaf's gradient is final
  /// for that pass: after the last op of the graph that uses the leaf has added its share, before
  /// backward() goes on to the ops that remain. Hooks run on the thread calling backward(), in the
  /// order backward finishes the leaves (about the reverse of the forward order), and in the
  /// order added for one leaf. `owner` groups hooks for remove_gradient_ready_hooks. This is
  /// what lets a data-parallel reducer start a bucket's allreduce while backward continues.
  /// Requires a leaf that requires gradients and a callable hook; throws dpl::Error otherwise.
  void add_gradient_ready_hook(const void* owner, std::function<void()> hook) const;
  /// Removes every hook added with `owner` (none: nothing happens).
  void remove_gradient_ready_hooks(const void* owner) const;

  /// Back-propagates from this one-element variable: every leaf that requires gradients and was
  /// used to compute it gets d(this)/d(leaf) added to its grad(). The graph is freed afterwards
  /// (the creators of every variable on it are dropped), so a second backward() through the same
  /// graph throws. Throws dpl::Error when this variable has more than one element.
  void backward() const;
  /// Back-propagates from this variable of any shape with `gradient` as the gradient of the
  /// quantity being differentiated with respect to it (PyTorch's tensor.backward(gradient)): the
  /// leaves get that gradient's vector-Jacobian product added to their grad(), and the graph is
  /// freed as by backward(). Throws dpl::Error unless gradient has this variable's shape, dtype and
  /// device.
  void backward(const Tensor& gradient) const;

  /// Opaque identity, for graph bookkeeping and tests.
  const VariableImpl* id() const { return impl_.get(); }

  // --- used by ops (src/autograd/ops/) ----------------------------------------------------------
  /// A non-leaf result of creator.
  static Variable make_result(Tensor data, std::shared_ptr<Node> creator);
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

 private:
  // Lets go of impl_; frees the value of a non-leaf that only graph nodes still list.
  void drop_handle() noexcept;

  std::shared_ptr<VariableImpl> impl_;
};

/// While alive, ops record the graph when `enabled`, and record none otherwise (PyTorch's
/// set_grad_enabled). Nests; restores the previous mode on exit.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

/// While alive, ops record no graph (evaluation).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

/// While alive, ops record the graph again, also inside a NoGradGuard (PyTorch's enable_grad).
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

/// True unless the innermost guard alive on this thread turned recording off (NoGradGuard).
bool grad_enabled();

}  // namespace dpl
