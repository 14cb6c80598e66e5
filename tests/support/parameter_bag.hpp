#pragma once
// A module whose parameters and children a test chooses, registered in the order the test adds
// them (unlike any alphabetical order), for tests of arenas and what is built on them.

#include <memory>
#include <string>
#include <utility>

#include "dpl/nn/module.hpp"

namespace dpl::test {

class ParameterBag : public nn::Module {
 public:
  Variable forward(const Variable& x) override { return x; }
  Variable add(const std::string& name, Tensor value) { return register_parameter(name, std::move(value)); }
  template <typename M>
  std::shared_ptr<M> child(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

}  // namespace dpl::test
