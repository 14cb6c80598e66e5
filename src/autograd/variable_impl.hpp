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

  Tensor data;
  Tensor grad;
  std::shared_ptr<Node> creator;
  bool requires_grad = false;
  // Set once backward() has consumed the graph that produced this variable.
  bool graph_freed = false;
  // Leaves only: run when a backward pass has finished this variable's gradient (owner, hook).
  std::vector<std::pair<const void*, std::function<void()>>> gradient_ready_hooks;
};

}  // namespace dpl
