#include "dpl/autograd/node.hpp"

#include "autograd/variable_impl.hpp"

namespace dpl {

// A node counts its listings of each input, so that a variable knows when the graph is all that
// still holds it (Variable::drop_handle). The count drops before the listing itself goes.

Node::~Node() { clear_inputs(); }

void Node::set_inputs(std::vector<Variable> inputs) {
  clear_inputs();
  for (const Variable& in : inputs)
    if (in.impl()) ++in.impl()->graph_refs;
  inputs_ = std::move(inputs);
}

void Node::clear_inputs() {
  for (const Variable& in : inputs_)
    if (in.impl()) --in.impl()->graph_refs;
  inputs_.clear();
}

}  // namespace dpl
