#pragma once
// Shared pieces of the CPU backend: the parallel grain, the index loop, and the adapter that
// runs a float32 kernel on 16-bit tensors. Internal header.
//
// The CPU computes in float32 only. A kernel over bfloat16 or float16 tensors is its float32
// implementation run on widened copies: every 16-bit tensor argument is converted to a float32
// tensor, the float32 kernel runs, and every output (a non-const Tensor& argument) is rounded
// back once. Sums therefore accumulate in float32 (or double, where the float32 kernel does), as
// the kernel conventions require, and float32 calls go straight through.

#include <cstdint>
#include <tuple>
#include <utility>

#include "backend/kernels.hpp"

namespace dpl::backend::cpu {

/// Below this many elements a loop runs on one thread: waking the pool costs more than it saves.
inline constexpr std::int64_t kParallelGrain = 1 << 15;

/// Calls f(i) for every i in [0, n): one vectorisable loop, threaded above kParallelGrain.
template <typename F>
void for_each_index(std::int64_t n, F&& f) {
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

/// True for bfloat16 and float16.
inline bool is_16bit(DType t) { return t == kBFloat16 || t == kFloat16; }

/// dst = src converted between float32, bfloat16 and float16 (same element count, both
/// contiguous host tensors; nearest even; NaN stays NaN).
void convert(const Tensor& src, Tensor& dst);

namespace widen_detail {

/// An argument passed through unchanged.
template <typename T>
struct Arg {
  explicit Arg(T v) : value(std::forward<T>(v)) {}
  T get() { return std::forward<T>(value); }
  void finish() {}
  T value;
};

/// An input tensor: a float32 copy when it is 16-bit.
template <>
struct Arg<const Tensor&> {
  explicit Arg(const Tensor& t) : work(is_16bit(t.dtype()) ? widened(t) : t) {}
  const Tensor& get() { return work; }
  void finish() {}
  static Tensor widened(const Tensor& t) {
    Tensor f = Tensor::empty(t.shape(), kFloat32);
    convert(t, f);
    return f;
  }
  Tensor work;
};

/// An output tensor: a float32 copy (holding the old values, for beta 1) that is rounded back.
template <>
struct Arg<Tensor&> {
  explicit Arg(Tensor& t) : original(t), work(is_16bit(t.dtype()) ? Arg<const Tensor&>::widened(t) : t) {}
  Tensor& get() { return work; }
  void finish() {
    if (is_16bit(original.dtype())) convert(work, original);
  }
  Tensor& original;
  Tensor work;
};

/// An optional output tensor (null when not wanted): as Arg<Tensor&> when given.
template <>
struct Arg<Tensor*> {
  explicit Arg(Tensor* t) : original(t) {
    if (original != nullptr && is_16bit(original->dtype())) work = Arg<const Tensor&>::widened(*original);
  }
  Tensor* get() { return work.defined() ? &work : original; }
  void finish() {
    if (work.defined()) convert(work, *original);
  }
  Tensor* original;
  Tensor work;
};

template <typename T>
bool is_16bit_tensor(const T&) {
  return false;
}
inline bool is_16bit_tensor(const Tensor& t) { return is_16bit(t.dtype()); }
inline bool is_16bit_tensor(Tensor* t) { return t != nullptr && is_16bit(t->dtype()); }

}  // namespace widen_detail

template <auto Fn>
struct Widened;

/// Widened<fn>::run: fn (a float32 kernel) for float32, bfloat16 and float16 tensors.
template <typename... Args, void (*Fn)(Args...)>
struct Widened<Fn> {
  static void run(Args... args) {
    if (!(widen_detail::is_16bit_tensor(args) || ...)) return Fn(std::forward<Args>(args)...);
    std::tuple<widen_detail::Arg<Args>...> work(widen_detail::Arg<Args>(std::forward<Args>(args))...);
    std::apply([](auto&... a) { Fn(a.get()...); }, work);
    std::apply([](auto&... a) { (a.finish(), ...); }, work);
  }
};

}  // namespace dpl::backend::cpu

/// Registers fn, a float32 CPU kernel, for every float dtype of the kernel (see Widened).
#define DPL_REGISTER_CPU_FLOAT_KERNEL(kernel, fn) \
  DPL_REGISTER_KERNEL(kernel, kCpu, ::dpl::backend::cpu::Widened<fn>::run)
