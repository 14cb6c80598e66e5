#pragma once
// Kernel dispatch. Each kernel is one stub object (declared once, in kernels.hpp) that holds one
// function pointer per backend. Backends fill them in at static initialisation with
// DPL_REGISTER_KERNEL from file-local functions, and a call picks the pointer from the device of
// the call's tensor (or Device) arguments after checking that the arguments agree.
//
// Stubs have constexpr constructors, so they are constant-initialised: they exist, empty, before
// any registration runs, whatever the order in which the library's files are initialised.

#include <cstdint>
#include <type_traits>
#include <utility>

#include "dpl/core/device.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend {

/// The backends a kernel can be implemented for; the index of a stub's function pointers.
enum class Backend : std::uint8_t { kCpu = 0, kCuda = 1 };
inline constexpr Backend kCpu = Backend::kCpu;
inline constexpr Backend kCuda = Backend::kCuda;
inline constexpr int kNumBackends = 2;

/// What the dispatcher checks about the dtypes of a kernel's tensor arguments before the call.
/// Tensor arguments are counted among tensors only (the first tensor is 0).
struct DTypeRule {
  enum class Kind : std::uint8_t {
    kAny,           // nothing (the kernel checks what it needs)
    kSame,          // every tensor has the dtype of the first
    kFloating,      // every tensor has one dtype: float32, bfloat16 or float16
    kFloatingEach,  // every tensor is float32, bfloat16 or float16, not necessarily the same
    kFloat32,       // every tensor is float32
  };
  Kind kind = Kind::kAny;
  /// Bit i set: tensor i is exempt from `kind` and must be int32 instead (class labels).
  std::uint32_t int32_tensors = 0;
  /// Bit i set: tensor i is exempt from `kind` and must be float32 instead (statistics kept in
  /// float32 beside 16-bit data).
  std::uint32_t float32_tensors = 0;
  /// Bit i set: tensor i follows `kind` but may be float32 instead (a float32 result or
  /// accumulator beside 16-bit operands, which then is not rounded to 16 bits).
  std::uint32_t widened_tensors = 0;
  /// Bit i set: tensor i is exempt from `kind` and must be int64 instead (a counter).
  std::uint32_t int64_tensors = 0;

  static constexpr DTypeRule any() { return {Kind::kAny}; }
  static constexpr DTypeRule same() { return {Kind::kSame}; }
  static constexpr DTypeRule floating() { return {Kind::kFloating}; }
  static constexpr DTypeRule floating_each() { return {Kind::kFloatingEach}; }
  static constexpr DTypeRule float32() { return {Kind::kFloat32}; }
  /// This rule with tensor `index` required to be int32.
  constexpr DTypeRule int32_at(int index) const {
    return {kind, int32_tensors | (std::uint32_t{1} << index), float32_tensors, widened_tensors, int64_tensors};
  }
  /// This rule with tensor `index` required to be float32.
  constexpr DTypeRule float32_at(int index) const {
    return {kind, int32_tensors, float32_tensors | (std::uint32_t{1} << index), widened_tensors, int64_tensors};
  }
  /// This rule with tensor `index` allowed to be float32 as well as what `kind` asks.
  constexpr DTypeRule or_float32_at(int index) const {
    return {kind, int32_tensors, float32_tensors, widened_tensors | (std::uint32_t{1} << index), int64_tensors};
  }
  /// This rule with tensor `index` required to be int64.
  constexpr DTypeRule int64_at(int index) const {
    return {kind, int32_tensors, float32_tensors, widened_tensors, int64_tensors | (std::uint32_t{1} << index)};
  }
};

namespace dispatch_detail {

/// A tensor argument of a call and its position among all arguments (for messages).
struct TensorArg {
  const Tensor* tensor;
  int position;
};

/// Checks one call: every tensor defined, every tensor and Device argument on one device, dtypes
/// as `rule` says. Returns that device. Throws dpl::Error naming the kernel, the arguments (by
/// their names in `signature`, the declared signature's text) and what was expected and received.
Device check_call(const char* kernel, const char* signature, DTypeRule rule, const TensorArg* tensors, int n_tensors,
                  const Device* devices, int n_devices);

/// Throws dpl::Error: `kernel` has no implementation for `device` (a build without CUDA says so).
[[noreturn]] void no_implementation(const char* kernel, Device device);

template <typename T>
inline void collect(const T&, int, TensorArg*, int&, Device*, int&) {}
inline void collect(const Tensor& t, int position, TensorArg* ts, int& nt, Device*, int&) { ts[nt++] = {&t, position}; }
inline void collect(const Device& d, int, TensorArg*, int&, Device* ds, int& nd) { ds[nd++] = d; }

}  // namespace dispatch_detail

template <typename Signature>
class KernelStub;

/// A kernel with signature R(Args...): one implementation per backend, picked per call.
template <typename R, typename... Args>
class KernelStub<R(Args...)> {
 public:
  using Fn = R (*)(Args...);

  constexpr KernelStub(const char* name, const char* signature, DTypeRule rule)
      : name_(name), signature_(signature), rule_(rule) {}
  KernelStub(const KernelStub&) = delete;
  KernelStub& operator=(const KernelStub&) = delete;

  /// Runs the implementation of the arguments' device. Requires at least one Tensor or Device
  /// argument. Throws dpl::Error when the arguments span devices, break the dtype rule, or
  /// their device's backend has no implementation (or is not built).
  R operator()(Args... args) const {
    static_assert(kTensors + kDevices > 0, "a kernel needs a Tensor or Device argument to dispatch on");
    dispatch_detail::TensorArg ts[kTensors + 1] = {};
    Device ds[kDevices + 1] = {};
    int nt = 0, nd = 0, position = 0;
    (dispatch_detail::collect(args, position++, ts, nt, ds, nd), ...);
    const Device device = dispatch_detail::check_call(name_, signature_, rule_, ts, nt, ds, nd);
    const Fn fn = fns_[device.is_cpu() ? 0 : 1];
    if (fn == nullptr) dispatch_detail::no_implementation(name_, device);
    return fn(std::forward<Args>(args)...);
  }

  /// Installs backend's implementation (at static initialisation, through DPL_REGISTER_KERNEL).
  void set(Backend backend, Fn fn) { fns_[static_cast<int>(backend)] = fn; }
  /// True when backend has an implementation.
  bool has(Backend backend) const { return fns_[static_cast<int>(backend)] != nullptr; }
  /// The kernel's name, as declared.
  const char* name() const { return name_; }

 private:
  static constexpr int kTensors = (0 + ... + (std::is_same_v<std::decay_t<Args>, Tensor> ? 1 : 0));
  static constexpr int kDevices = (0 + ... + (std::is_same_v<std::decay_t<Args>, Device> ? 1 : 0));

  const char* name_;
  const char* signature_;
  DTypeRule rule_;
  Fn fns_[kNumBackends] = {};
};

}  // namespace dpl::backend

/// Declares kernel `name` with dtype rule `rule` (a DTypeRule) and signature `sig` (a function
/// type whose parameters are named: the names appear in error messages). Written once, in
/// kernels.hpp; kernels.cpp defines the stubs by including that header with DPL_DEFINE_KERNELS.
#ifdef DPL_DEFINE_KERNELS
#define DPL_DECLARE_KERNEL(name, rule, ...) \
  KernelStub<__VA_ARGS__> name(#name, #__VA_ARGS__, DTypeRule::rule)
#else
#define DPL_DECLARE_KERNEL(name, rule, ...) extern KernelStub<__VA_ARGS__> name
#endif

#define DPL_KERNEL_CONCAT_(a, b) a##b
#define DPL_KERNEL_CONCAT(a, b) DPL_KERNEL_CONCAT_(a, b)

/// Registers fn (a function with exactly the kernel's signature) as the implementation of `kernel`
/// for backend `which` (kCpu or kCuda; both unqualified names in dpl::backend). Use at namespace
/// scope in the backend's file.
#define DPL_REGISTER_KERNEL(kernel, which, fn)                                                \
  static const bool DPL_KERNEL_CONCAT(dpl_registered_##kernel##_, __LINE__) [[maybe_unused]] = \
      (::dpl::backend::kernel.set(::dpl::backend::which, fn), true)
