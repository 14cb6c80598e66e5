#include "dpl/autograd/node.hpp"

#include "autograd/variable_impl.hpp"
#include "dpl/core/error.hpp"

namespace dpl {

// A node counts its listings of each input, so that a variable knows when the graph is all that
// still holds it (Variable::drop_handle). The count drops before the listing itself goes.

Node::~Node() { clear_inputs(); }

bool GradTarget::fits(const Tensor& t) const {
  if (t.shape() != shape || t.dtype() != options.dtype || t.device() != options.device) return false;
  return format == MemoryFormat::kChannelsLast ? t.memory_format() == MemoryFormat::kChannelsLast : t.is_contiguous();
}

Tensor& GradTarget::allocate() {
  DPL_CHECK(unallocated && tensor != nullptr && !tensor->defined(),
            "GradTarget::allocate: expected an unallocated target whose buffer is not defined yet");
  *tensor = format == MemoryFormat::kChannelsLast ? Tensor::empty_channels_last(shape, options)
                                                  : Tensor::empty(shape, options);
  return *tensor;
}

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
