#include "dpl/nn/any_module.hpp"

#include <sstream>

#if defined(__GNUG__)
#include <cxxabi.h>

#include <cstdlib>
#endif

#include "dpl/core/error.hpp"

namespace dpl::nn {

std::string type_name(const std::type_info& type) {
  std::string name = type.name();
#if defined(__GNUG__)
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) name = demangled;
  std::free(demangled);
#endif
  return name;
}

namespace any_module_detail {

namespace {
// "(dpl::Variable, dpl::Tensor)"
template <typename List, typename TypeOf>
std::string parenthesised(const List& list, TypeOf type_of) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < list.size(); ++i) os << (i ? ", " : "") << type_name(type_of(list[i]));
  os << ')';
  return os.str();
}
}  // namespace

void throw_mismatch(const std::string& module, const std::vector<const std::type_info*>& expected,
                    const std::vector<std::any>& given, const char* problem) {
  DPL_FAIL("AnyModule: ", module, "::forward takes ", expected.size(), " argument", expected.size() == 1 ? "" : "s",
           " ", parenthesised(expected, [](const std::type_info* t) -> const std::type_info& { return *t; }),
           ", got ", given.size(), " ", parenthesised(given, [](const std::any& a) -> const std::type_info& {
             return a.type();
           }),
           problem);
}

void throw_return_mismatch(const std::string& module, const std::type_info& returned, const std::type_info& asked) {
  DPL_FAIL("AnyModule: ", module, "::forward returns ", type_name(returned), ", but the call asked for ",
           type_name(asked), " (name the type: any.forward<", type_name(returned), ">(...))");
}

void check_module(const void* module) { DPL_CHECK(module != nullptr, "AnyModule: expected a module, got null"); }

}  // namespace any_module_detail

std::string AnyModule::name() const { return holder_ ? type_name(holder_->type()) : "empty"; }

std::size_t AnyModule::arity() const {
  check_not_empty();
  return holder_->arity();
}

void AnyModule::check_not_empty() const {
  DPL_CHECK(holder_ != nullptr, "AnyModule: the holder is empty; construct it from a module first");
}

void AnyModule::throw_not_a(const std::type_info& wanted) const {
  DPL_FAIL("AnyModule: asked for the module as ", type_name(wanted), ", but it holds ", name());
}

}  // namespace dpl::nn
