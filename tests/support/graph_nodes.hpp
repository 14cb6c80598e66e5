#pragma once
// Counting the recorded ops behind a variable by name: what tests read to see which ops a forward
// pass recorded (a checkpointed block records one node instead of its ops).

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "dpl/autograd/node.hpp"
#include "dpl/autograd/variable.hpp"

namespace dpl::test {

/// How many nodes of the graph behind v (not yet run backward) are named `name`.
inline std::int64_t nodes_named(const Variable& v, const std::string& name) {
  std::int64_t count = 0;
  std::vector<const Node*> stack{v.creator().get()};
  std::set<const Node*> seen;
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    count += name == node->name();
    for (const Variable& in : node->inputs()) stack.push_back(in.creator().get());
  }
  return count;
}

}  // namespace dpl::test
