#include "dpl/autograd/variable.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/variable_impl.hpp"
#include "backend/kernels.hpp"
#include "dpl/autograd/node.hpp"

namespace dpl {

namespace {
thread_local bool t_grad_enabled = true;

const Tensor& undefined_tensor() {
  static const Tensor t;
  return t;
}

// An uninitialised gradient buffer for impl's value, also after that value was released: same
// shape, dtype, device and memory format.
Tensor gradient_buffer_for(const VariableImpl& impl) {
  if (!impl.released) return Tensor::empty_like(impl.data);
  return impl.released_format == MemoryFormat::kChannelsLast
             ? Tensor::empty_channels_last(impl.released_shape, impl.released_options)
             : Tensor::empty(impl.released_shape, impl.released_options);
}

// An op may hand one tensor to several inputs as their gradient buffers (add passes its output
// gradient to both operands). Before anything adds into such a buffer in place, the variable
// gets a copy of its own; usually the other holders are gone by then (the operand's other
// consumers run after the branch that shared it) and nothing is copied. Only intermediate
// buffers are ever shared: a leaf's gradient (perhaps a view of a reducer's arena) is written in
// place always.
void own_buffer(Tensor& buffer) {
  if (buffer.storage().use_count() == 1) return;
  Tensor copy = Tensor::empty_like(buffer);
  copy.copy_(buffer);
  buffer = std::move(copy);
}

// A target writing (beta 0) or adding (beta 1) into buffer; the other fields keep their defaults.
GradTarget target(Tensor* buffer, float beta) {
  GradTarget t;
  t.tensor = buffer;
  t.beta = beta;
  return t;
}

// Every non-leaf variable has exactly one creator and every node one output, so the gradient
// flowing into a non-leaf variable is keyed by its creator.
struct Backprop {
  std::unordered_map<const Node*, Tensor> output_grads;

  // Fills one target for input var. `fresh` is set when the target is a temporary that the
  // caller must add into the real buffer afterwards (the same variable appears twice).
  GradTarget target_for(const Variable& var, std::unordered_set<const VariableImpl*>& seen, Tensor& scratch,
                        Tensor*& merge_into, bool adopting) {
    merge_into = nullptr;
    VariableImpl& impl = *var.impl();
    Tensor* buffer = nullptr;
    if (impl.creator) {
      auto it = output_grads.find(impl.creator.get());
      if (it == output_grads.end()) {
        it = output_grads.emplace(impl.creator.get(), Tensor()).first;
      }
      buffer = &it->second;
    } else if (impl.requires_grad) {
      buffer = &impl.grad;
    } else {
      return {};
    }
    if (!seen.insert(&impl).second) {
      // Same variable twice among this node's inputs: write to scratch, add afterwards.
      scratch = gradient_buffer_for(impl);
      merge_into = buffer;
      return target(&scratch, 0.f);
    }
    // A gradient buffer takes the memory format of its variable's data, so that a channels-last
    // network's gradients stay channels-last and its ops need no conversions in backward.
    if (!buffer->defined()) {
      GradTarget fresh = target(buffer, 0.f);
      fresh.replaceable = impl.creator != nullptr;
      if (adopting && fresh.replaceable) {
        fresh.unallocated = true;
        fresh.shape = impl.released ? impl.released_shape : impl.data.shape();
        fresh.options = impl.released ? impl.released_options : TensorOptions(impl.data.dtype(), impl.data.device());
        fresh.format = impl.released ? impl.released_format : impl.data.memory_format();
        return fresh;
      }
      *buffer = gradient_buffer_for(impl);
      return fresh;
    }
    if (impl.creator) own_buffer(*buffer);
    return target(buffer, 1.f);
  }
};

// Reverse topological order of the nodes reachable from root (root first), iteratively so that
// deep graphs cannot overflow the stack.
std::vector<std::shared_ptr<Node>> topological_order(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> post;
  std::unordered_set<const Node*> visited;
  std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack;
  stack.emplace_back(root, 0);
  visited.insert(root.get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    const auto& inputs = node->inputs();
    if (next < inputs.size()) {
      const Variable& input = inputs[next++];
      // A variable shared with a graph that already ran backward has lost its creator; going on
      // would silently drop every gradient that should flow through it. Checked before any node
      // runs, so a refused backward changes nothing.
      DPL_CHECK(!input.impl()->graph_freed, "backward: an input of ", node->name(),
                " was computed by a graph that an earlier backward() freed; run the forward pass again");
      const auto& creator = input.creator();
      if (creator && visited.insert(creator.get()).second) stack.emplace_back(creator, 0);
    } else {
      post.push_back(node);
      stack.pop_back();
    }
  }
  return {post.rbegin(), post.rend()};
}
}  // namespace

VariableImpl::~VariableImpl() {
  // Left to the default destructors, dropping the last handle to a graph that never ran backward
  // recurses variable -> creator -> inputs -> variable once per node and overflows the stack on
  // long chains. Instead, detach the creators that only this graph holds and free them from a
  // heap worklist; each node is then destroyed with no graph left behind it.
  if (!creator) return;
  std::vector<std::shared_ptr<Node>> pending;
  pending.push_back(std::move(creator));
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    if (node.use_count() > 1) continue;  // still held elsewhere: dropping our reference is shallow
    // Take one reference per distinct input (mul(h, h) lists h twice), so that a use count of one
    // means nothing outside this graph holds the input.
    std::vector<std::shared_ptr<VariableImpl>> inputs;
    for (const Variable& in : node->inputs())
      if (in.impl()) inputs.push_back(in.impl());
    node->clear_inputs();
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    for (auto& impl : inputs)
      if (impl.use_count() == 1 && impl->creator) pending.push_back(std::move(impl->creator));
  }
}

Variable& Variable::operator=(const Variable& other) {
  if (impl_ != other.impl_) {
    drop_handle();
    impl_ = other.impl_;
  }
  return *this;
}

Variable& Variable::operator=(Variable&& other) noexcept {
  if (this != &other) {
    drop_handle();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Variable::~Variable() { drop_handle(); }

void Variable::drop_handle() noexcept {
  if (!impl_) return;
  VariableImpl& impl = *impl_;
  // This handle and the graph's listings are all that is left: nobody outside the graph can
  // read the value again, and the ops that need it in backward hold their own reference.
  const bool only_graph_left = impl.creator && !impl.released && impl.data.defined() &&
                               static_cast<std::size_t>(impl_.use_count()) == impl.graph_refs + 1;
  if (only_graph_left && impl.graph_refs > 0) {
    impl.released_shape = impl.data.shape();
    impl.released_options = TensorOptions(impl.data.dtype(), impl.data.device());
    impl.released_format = impl.data.memory_format();
    impl.released = true;
    impl.data = Tensor();
  }
  impl_.reset();
}

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
}

Variable Variable::make_result(Tensor data, std::shared_ptr<Node> creator) {
  Variable v(std::move(data), creator != nullptr);
  if (creator) creator->set_output(v.impl_);
  v.impl_->creator = std::move(creator);
  return v;
}

const Tensor& Variable::data() const {
  DPL_CHECK(impl_, "Variable: the variable is undefined (default-constructed)");
  return impl_->data;
}

namespace {
std::atomic<std::uint64_t> g_rebind_count{0};
}  // namespace

std::uint64_t Variable::rebind_count() { return g_rebind_count.load(std::memory_order_relaxed); }

void Variable::set_data(Tensor data) {
  DPL_CHECK(impl_, "Variable::set_data: the variable is undefined");
  impl_->data = std::move(data);
  impl_->released = false;
  impl_->grad = Tensor();
  g_rebind_count.fetch_add(1, std::memory_order_relaxed);
}

const Tensor& Variable::grad() const { return impl_ ? impl_->grad : undefined_tensor(); }

void Variable::set_grad(Tensor grad) {
  DPL_CHECK(impl_, "Variable::set_grad: the variable is undefined");
  if (grad.defined()) {
    DPL_CHECK(grad.shape() == impl_->data.shape() && grad.dtype() == impl_->data.dtype() &&
                  grad.device() == impl_->data.device(),
              "Variable::set_grad: expected a gradient of shape ", shape_str(impl_->data.shape()), " dtype ",
              impl_->data.dtype(), " on ", impl_->data.device(), ", got shape ", shape_str(grad.shape()), " dtype ",
              grad.dtype(), " on ", grad.device());
  }
  impl_->grad = std::move(grad);
  g_rebind_count.fetch_add(1, std::memory_order_relaxed);
}

void Variable::clear_grad() {
  if (!impl_) return;
  impl_->grad = Tensor();
  g_rebind_count.fetch_add(1, std::memory_order_relaxed);
}

bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }
void Variable::set_requires_grad(bool on) {
  DPL_CHECK(impl_, "Variable::set_requires_grad: the variable is undefined");
  DPL_CHECK(!impl_->creator || on, "Variable::set_requires_grad: a variable computed by an op always requires "
                                   "gradients while its graph exists");
  impl_->requires_grad = on;
}
void Variable::add_gradient_ready_hook(const void* owner, std::function<void()> hook) const {
  DPL_CHECK(impl_, "add_gradient_ready_hook: the variable is undefined");
  DPL_CHECK(!impl_->creator && impl_->requires_grad,
            "add_gradient_ready_hook: expected a leaf that requires gradients (a parameter), got ",
            impl_->creator ? "the result of an op" : "a leaf without requires_grad");
  DPL_CHECK(static_cast<bool>(hook), "add_gradient_ready_hook: expected a callable hook, got an empty one");
  impl_->gradient_ready_hooks.emplace_back(owner, std::move(hook));
}

void Variable::remove_gradient_ready_hooks(const void* owner) const {
  if (!impl_) return;
  auto& hooks = impl_->gradient_ready_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& e) { return e.first == owner; }),
              hooks.end());
}

bool Variable::is_leaf() const { return !impl_ || !impl_->creator; }

const std::shared_ptr<Node>& Variable::creator() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->creator : none;
}

void Variable::backward() const {
  DPL_CHECK(impl_, "backward: the variable is undefined");
  DPL_CHECK(impl_->data.numel() == 1, "backward: expected a variable with one element (a scalar loss), got shape ",
            shape_str(impl_->data.shape()));
  backward(Tensor::ones(impl_->data.shape(), TensorOptions(impl_->data.dtype(), impl_->data.device())));
}

void Variable::backward(const Tensor& gradient) const {
  DPL_CHECK(impl_, "backward: the variable is undefined");
  DPL_CHECK(!impl_->graph_freed, "backward: the graph of this variable was freed by an earlier backward(); "
                                 "run the forward pass again");
  const Tensor& value = impl_->data;
  DPL_CHECK(gradient.defined() && gradient.shape() == value.shape() && gradient.dtype() == value.dtype() &&
                gradient.device() == value.device(),
            "backward: expected a gradient of the variable's shape ", shape_str(value.shape()), ", dtype ",
            value.dtype(), " and device ", value.device(), ", got ",
            gradient.defined() ? "shape " + shape_str(gradient.shape()) : std::string("an undefined tensor"),
            gradient.defined() ? std::string(", dtype ") + dtype_name(gradient.dtype()) : std::string(),
            gradient.defined() ? ", device " + gradient.device().str() : std::string());
  const Tensor& seed = gradient;
  if (!impl_->creator) {
    DPL_CHECK(impl_->requires_grad, "backward: the variable neither requires a gradient nor was computed from one "
                                    "that does");
    if (impl_->grad.defined()) backend::axpby(1.f, seed, 1.f, impl_->grad);
    else impl_->grad = seed.clone();
    for (const auto& entry : impl_->gradient_ready_hooks) entry.second();
    return;
  }

  Backprop bp;
  bp.output_grads.emplace(impl_->creator.get(), seed);
  const auto order = topological_order(impl_->creator);
  // The leaves with gradient-ready hooks, listed after the last node (in this order) that uses
  // them: their gradients are final once that node has run.
  // Empty (no allocation) when no leaf has hooks, as in training without overlap.
  std::vector<std::vector<VariableImpl*>> ready_after;
  {
    std::unordered_map<VariableImpl*, std::size_t> last_use;
    for (std::size_t i = 0; i < order.size(); ++i)
      for (const Variable& in : order[i]->inputs()) {
        VariableImpl* leaf = in.impl().get();
        if (leaf && !leaf->creator && leaf->requires_grad && !leaf->gradient_ready_hooks.empty()) last_use[leaf] = i;
      }
    if (!last_use.empty()) ready_after.resize(order.size());
    for (const auto& [leaf, i] : last_use) ready_after[i].push_back(leaf);
    // Several leaves finished by one node: in their order among the node's inputs, not the map's.
    for (std::size_t i = 0; i < ready_after.size(); ++i)
      if (ready_after[i].size() > 1) {
        std::vector<VariableImpl*> ordered;
        for (const Variable& in : order[i]->inputs())
          if (std::find(ready_after[i].begin(), ready_after[i].end(), in.impl().get()) != ready_after[i].end() &&
              std::find(ordered.begin(), ordered.end(), in.impl().get()) == ordered.end())
            ordered.push_back(in.impl().get());
        ready_after[i] = std::move(ordered);
      }
  }
  // How many uses of each op's result are still to run backward: the one that brings it to zero
  // completes the result's gradient (GradTarget::completes).
  std::unordered_map<const VariableImpl*, int> uses_left;
  for (const auto& node : order)
    for (const Variable& in : node->inputs())
      if (in.impl() && in.impl()->creator) ++uses_left[in.impl().get()];
  std::vector<GradTarget> targets;
  std::vector<Tensor> scratch;
  std::vector<Tensor*> merge;
  std::unordered_set<const VariableImpl*> seen;
  for (std::size_t index = 0; index < order.size(); ++index) {
    const auto& node = order[index];
    auto it = bp.output_grads.find(node.get());
    const Tensor grad_out = it->second;
    bp.output_grads.erase(it);  // this node's output gradient is consumed now; free it early

    const auto& inputs = node->inputs();
    targets.assign(inputs.size(), GradTarget{});
    scratch.assign(inputs.size(), Tensor());
    merge.assign(inputs.size(), nullptr);
    seen.clear();
    const bool adopting = node->adopts_gradient_buffers();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      targets[i] = bp.target_for(inputs[i], seen, scratch[i], merge[i], adopting);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const VariableImpl* impl = inputs[i].impl().get();
      if (impl == nullptr || !impl->creator) continue;
      // An input listed twice: its first listing is not the last use, and its second goes through
      // scratch (merge) added after the node ran, so neither completes the gradient.
      if (--uses_left[impl] == 0 && !merge[i] && targets[i].needed()) targets[i].completes = true;
    }
    node->backward(grad_out, targets);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      DPL_CHECK(!targets[i].unallocated || targets[i].tensor->defined(), "backward of ", node->name(),
                ": expected the gradient buffer of input ", i, " to be defined by the op (it adopts its buffers), ",
                "got none");
      if (!merge[i]) continue;
      if (inputs[i].creator()) own_buffer(*merge[i]);
      backend::axpby(1.f, scratch[i], 1.f, *merge[i]);
    }
    if (!ready_after.empty())
      for (VariableImpl* leaf : ready_after[index])
        for (const auto& entry : leaf->gradient_ready_hooks) entry.second();
    // Free the graph as we go. Every consumer of this node's output ran before it (topological
    // order), so the output can forget its creator now; the node drops its saved tensors.
    if (auto out = node->output().lock()) {
      out->creator.reset();
      out->graph_freed = true;
      out->requires_grad = false;
    }
    node->release();
    node->clear_inputs();
  }
}

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_enabled) { t_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }

bool any_requires_grad(std::initializer_list<const Variable*> vars) {
  if (!t_grad_enabled) return false;
  for (const Variable* v : vars)
    if (v->defined() && v->requires_grad()) return true;
  return false;
}

}  // namespace dpl
