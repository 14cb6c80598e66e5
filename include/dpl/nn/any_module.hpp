#pragma once
// AnyModule: holds any module with a forward() of any signature and calls it, checking the
// arguments at run time, as libtorch's AnyModule. Containers (Sequential) hold AnyModules.

#include <any>
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

/// The readable (demangled) name of a type, e.g. "dpl::Variable" or "dpl::nn::Linear".
std::string type_name(const std::type_info& type);

namespace any_module_detail {

// The return and parameter types of a member function.
template <typename F>
struct Signature;
template <typename C, typename R, typename... P>
struct Signature<R (C::*)(P...)> {
  using Return = R;
  using Params = std::tuple<P...>;
};
template <typename C, typename R, typename... P>
struct Signature<R (C::*)(P...) const> : Signature<R (C::*)(P...)> {};

// True when M has exactly one forward (not overloaded, not a template), so &M::forward names it.
template <typename M, typename = void>
struct HasOneForward : std::false_type {};
template <typename M>
struct HasOneForward<M, std::void_t<decltype(&M::forward)>> : std::true_type {};

// True for a forward of one Variable returning a Variable (by value or const reference).
template <typename R, typename Params>
struct TakesOneVariable : std::false_type {};
template <typename P>
struct TakesOneVariable<Variable, std::tuple<P>>
    : std::bool_constant<std::is_same_v<std::decay_t<P>, Variable> && !std::is_rvalue_reference_v<P> &&
                         !(std::is_lvalue_reference_v<P> && !std::is_const_v<std::remove_reference_t<P>>)> {};

// Throws the dpl::Error for a call whose arguments do not fit the forward: names the module,
// the parameters it takes and the arguments it was given, then adds `problem`.
[[noreturn]] void throw_mismatch(const std::string& module, const std::vector<const std::type_info*>& expected,
                                 const std::vector<std::any>& given, const char* problem);
// Throws the dpl::Error for a result of another type than the caller asked for.
[[noreturn]] void throw_return_mismatch(const std::string& module, const std::type_info& returned,
                                        const std::type_info& asked);
// Requires a non-null module (throws dpl::Error otherwise).
void check_module(const void* module);

// The type-erased interface; one implementation per module type.
class Holder {
 public:
  virtual ~Holder() = default;
  // forward(args...) with args checked against the parameters; the result, empty for void.
  virtual std::any call(std::vector<std::any>& args) = 0;
  // forward(x) without erasing x when the forward takes one Variable; else as call().
  virtual Variable call_one(const Variable& x) = 0;
  virtual std::shared_ptr<Module> module() const = 0;
  virtual const std::type_info& type() const = 0;
  virtual std::size_t arity() const = 0;
};

template <typename M>
class ModuleHolder final : public Holder {
  using Sig = Signature<decltype(&M::forward)>;
  using Params = typename Sig::Params;
  static constexpr std::size_t kArity = std::tuple_size_v<Params>;

 public:
  explicit ModuleHolder(std::shared_ptr<M> module) : module_(std::move(module)) {}

  std::any call(std::vector<std::any>& args) override {
    check(args);
    return invoke(args, std::make_index_sequence<kArity>{});
  }

  Variable call_one(const Variable& x) override {
    if constexpr (TakesOneVariable<typename Sig::Return, Params>::value) {
      return module_->forward(x);
    } else {
      std::vector<std::any> args{std::any(x)};
      std::any result = call(args);
      if (result.type() != typeid(Variable)) throw_return_mismatch(name(), result.type(), typeid(Variable));
      return std::any_cast<Variable>(std::move(result));
    }
  }

  std::shared_ptr<Module> module() const override { return module_; }
  const std::type_info& type() const override { return typeid(*module_); }
  std::size_t arity() const override { return kArity; }

 private:
  std::string name() const { return type_name(typeid(*module_)); }

  template <std::size_t... I>
  static std::vector<const std::type_info*> expected(std::index_sequence<I...>) {
    return {&typeid(std::decay_t<std::tuple_element_t<I, Params>>)...};
  }

  void check(const std::vector<std::any>& args) const {
    const auto want = expected(std::make_index_sequence<kArity>{});
    if (args.size() != kArity) throw_mismatch(name(), want, args, "");
    for (std::size_t i = 0; i < kArity; ++i)
      if (args[i].type() != *want[i])
        throw_mismatch(name(), want, args,
                       "; the types must match exactly (a Tensor is not a Variable, an int not a float)");
  }

  template <std::size_t I>
  static std::tuple_element_t<I, Params>&& arg(std::any& a) {
    using P = std::tuple_element_t<I, Params>;
    return static_cast<P&&>(*std::any_cast<std::decay_t<P>>(&a));
  }

  template <std::size_t... I>
  std::any invoke(std::vector<std::any>& args, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<typename Sig::Return>) {
      module_->forward(arg<I>(args[I])...);
      return {};
    } else {
      return std::any(module_->forward(arg<I>(args[I])...));
    }
  }

  std::shared_ptr<M> module_;
};

}  // namespace any_module_detail

/// Holds a module of any type that has one forward() of any signature, and calls it with
/// arguments checked at run time. This is how containers such as Sequential hold modules whose
/// forward takes other inputs than one Variable, and how a program calls a module it knows only
/// by a base-class pointer.
///
/// Requires of the module type M: derived from Module, with exactly one member function named
/// forward (not overloaded, not a template, no default arguments that a caller may leave out).
/// A module that only overrides Module::forward(const Variable&) qualifies, as do
/// Sequential and every layer of dpl::nn.
///
/// Calls: forward(args...) passes each argument by value (Variables and Tensors are handles, so
/// this copies no data) and requires, after removing const and references, exactly the types of
/// forward's parameters: a Tensor where a Variable is expected, or an int where a float is, is
/// refused with a dpl::Error that names the module, the parameter types it takes and the
/// argument types it was given. A call of one Variable on a forward of one Variable is direct
/// (no erasure, no allocation).
///
/// An AnyModule is a handle, as a shared_ptr: copies share the module, and a const AnyModule
/// still runs the module's (non-const) forward.
class AnyModule {
 public:
  /// An empty holder (is_empty()); calling it throws dpl::Error.
  AnyModule() = default;
  /// Holds module, which must not be null (throws dpl::Error otherwise).
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<Module, M>>>
  explicit AnyModule(std::shared_ptr<M> module) {
    static_assert(any_module_detail::HasOneForward<M>::value,
                  "AnyModule: the module type needs exactly one member function forward (not overloaded, "
                  "not a template)");
    any_module_detail::check_module(module.get());
    holder_ = std::make_shared<any_module_detail::ModuleHolder<M>>(std::move(module));
  }
  /// Holds a module object, moved into a new shared_ptr.
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<Module, std::decay_t<M>> &&
                                                    !std::is_lvalue_reference_v<M>>>
  explicit AnyModule(M&& module) : AnyModule(std::make_shared<std::decay_t<M>>(std::move(module))) {}

  /// The held module's forward(args...), its result as R (Variable by default). Throws
  /// dpl::Error when the holder is empty, when the arguments do not fit forward's parameters
  /// (see the class comment), or when forward returns another type than R.
  template <typename R = Variable, typename... Args>
  R forward(Args&&... args) const {
    check_not_empty();
    if constexpr (std::is_same_v<R, Variable> && sizeof...(Args) == 1 &&
                  (std::is_same_v<std::decay_t<Args>, Variable> && ...)) {
      return holder_->call_one(args...);
    } else {
      std::vector<std::any> erased;
      erased.reserve(sizeof...(Args));
      (erased.emplace_back(std::decay_t<Args>(std::forward<Args>(args))), ...);
      std::any result = holder_->call(erased);
      if constexpr (std::is_void_v<R>) {
        return;
      } else {
        if (result.type() != typeid(R))
          any_module_detail::throw_return_mismatch(name(), result.type(), typeid(R));
        return std::any_cast<R>(std::move(result));
      }
    }
  }
  /// forward(args...) returning a Variable: `any(x)`, `any(tokens, targets)`.
  template <typename... Args>
  Variable operator()(Args&&... args) const {
    return forward(std::forward<Args>(args)...);
  }

  /// True when the holder holds no module.
  bool is_empty() const { return holder_ == nullptr; }
  /// The held module (null when empty).
  std::shared_ptr<Module> ptr() const { return holder_ ? holder_->module() : nullptr; }
  /// The held module as M; throws dpl::Error when it is not an M (or the holder is empty).
  template <typename M>
  std::shared_ptr<M> ptr() const {
    auto typed = std::dynamic_pointer_cast<M>(ptr());
    if (typed == nullptr) throw_not_a(typeid(M));
    return typed;
  }
  /// The held module's dynamic type (typeid(void) when empty).
  const std::type_info& type_info() const { return holder_ ? holder_->type() : typeid(void); }
  /// The readable name of the held module's type ("dpl::nn::Linear"; "empty" when empty).
  std::string name() const;
  /// How many arguments the held module's forward takes. Requires a non-empty holder.
  std::size_t arity() const;

 private:
  void check_not_empty() const;
  [[noreturn]] void throw_not_a(const std::type_info& wanted) const;

  std::shared_ptr<any_module_detail::Holder> holder_;
};

}  // namespace dpl::nn
