#include "dpl/nn/containers.hpp"

#include "dpl/nn/any_module.hpp"

namespace dpl::nn {

void containers_detail::wrong_type(const char* container, const std::string& where, const Module& module,
                                   const std::type_info& wanted) {
  DPL_FAIL(container, ": expected the module at ", where, " to be a ", type_name(wanted), ", got a ",
           type_name(typeid(module)));
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  DPL_CHECK(module != nullptr, "ModuleList::push_back: expected a module, got null (at index ", modules_.size(), ")");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](std::size_t i) const {
  DPL_CHECK(i < modules_.size(), "ModuleList: expected an index < ", modules_.size(), ", got ", i);
  return modules_[i];
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [key, m] : modules) insert(key, m);
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  DPL_CHECK(module != nullptr, "ModuleDict::insert: expected a module for '", key, "', got null");
  register_module(key, module);  // checks that the key is new and has no '.'
  entries_.emplace_back(key, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : entries_)
    if (k == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : entries_) out.push_back(k);
  return out;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : entries_)
    if (k == key) return m;
  std::string listed;
  for (const auto& [k, m] : entries_) listed += (listed.empty() ? "'" : ", '") + k + "'";
  DPL_FAIL("ModuleDict: expected one of the keys ", listed.empty() ? std::string("(none: it is empty)") : listed,
           ", got '", key, "'");
}

}  // namespace dpl::nn
