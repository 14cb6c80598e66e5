#pragma once
// Containers that register sub-modules without running them: a list and a dictionary, as
// PyTorch's ModuleList and ModuleDict. The owner's forward decides how to use them.

#include <cstddef>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

namespace containers_detail {
/// Throws dpl::Error: the module at `where` of `container` is not an M (named by `wanted`).
[[noreturn]] void wrong_type(const char* container, const std::string& where, const Module& module,
                             const std::type_info& wanted);
}  // namespace containers_detail

/// Sub-modules in a list, registered as "0", "1", ..., so their parameters are named as in
/// PyTorch's nn.ModuleList ("blocks.3.weight"). It has no forward of its own (calling it throws);
/// the owner iterates it:
///     for (std::size_t i = 0; i < blocks->size(); ++i) x = blocks->at<Block>(i)->forward(x);
class ModuleList : public Module {
 public:
  ModuleList() = default;
  /// The modules, in order. Requires non-null modules (dpl::Error otherwise).
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends module under the next index. Requires a non-null module. Returns this list.
  ModuleList& push_back(std::shared_ptr<Module> module);
  /// The number of modules.
  std::size_t size() const { return modules_.size(); }
  /// The i-th module. Requires i < size() (dpl::Error naming both otherwise).
  const std::shared_ptr<Module>& operator[](std::size_t i) const;
  /// The i-th module as an M. Requires i < size() and a module of type M (or derived from it);
  /// dpl::Error naming the module's actual type otherwise.
  template <typename M>
  std::shared_ptr<M> at(std::size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!typed) containers_detail::wrong_type("ModuleList", std::to_string(i), *(*this)[i], typeid(M));
    return typed;
  }
  /// Iteration over the modules, in order.
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Sub-modules by name, in insertion order, as PyTorch's nn.ModuleDict: parameters are named
/// "<dict>.<key>.<name>". Keys follow the rules of sub-module names (unique, no '.'). No forward of
/// its own.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  /// The (key, module) pairs, in order. Requires what insert() requires.
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);
  /// Adds module under key. Requires a non-null module and a new key without '.' (dpl::Error
  /// otherwise). Returns this dictionary.
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  /// The number of modules.
  std::size_t size() const { return entries_.size(); }
  /// Whether key is present.
  bool contains(const std::string& key) const;
  /// The keys, in insertion order.
  std::vector<std::string> keys() const;
  /// The module under key. Requires a present key (dpl::Error listing the keys otherwise).
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  /// The module under key as an M; dpl::Error naming its actual type when it is not one.
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[key]);
    if (!typed) containers_detail::wrong_type("ModuleDict", "'" + key + "'", *(*this)[key], typeid(M));
    return typed;
  }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> entries_;
};

}  // namespace dpl::nn
