#pragma once
// The shared state behind a Variable handle.

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "dpl/tensor/tensor.hpp"

namespace dpl {

class Node;

struct VariableImpl {
  VariableImpl() = default;
  VariableImpl(const VariableImpl&) = delete;
  VariableImpl& operator=(const VariableImpl&) = delete;
  // Releases the graph behind this variable without recursing once per node (variable.cpp).
  ~VariableImpl();

  // Undefined once released (see graph_refs); its gradient buffer then comes from released_*.
  Tensor data;
  Tensor grad;
  // How many graph nodes list this variable among their inputs (once per listing). When the
  // handles that remain are exactly those, no user can read the value again, so a non-leaf drops
  // it: the ops that need it in backward saved their own reference (Variable::drop_handle).
  std::size_t graph_refs = 0;
  // The released value's shape, dtype, device and memory format, for allocating its gradient;
  // meaningful only when `released` is set.
  Shape released_shape;
  TensorOptions released_options;
  MemoryFormat released_format = MemoryFormat::kContiguous;
  bool released = false;
  std::shared_ptr<Node> creator;
  bool requires_grad = false;
  // Set once backward() has consumed the graph that produced this variable.
  bool graph_freed = false;
  // Leaves only: run when a backward pass has finished this variable's gradient (owner, hook).
  std::vector<std::pair<const void*, std::function<void()>>> gradient_ready_hooks;
};

}  // namespace dpl
