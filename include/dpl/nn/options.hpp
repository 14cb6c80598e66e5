#pragma once
// DPL_ARG: the building block of the layers' Options structs, as libtorch's TORCH_ARG.

/// Declares one setting of an Options struct: a private member `name_` of type T (initialise it
/// after the macro: `DPL_ARG(bool, bias) = true;`), a setter `name(value)` that returns the struct
/// so that settings chain (`Conv2dOptions(1, 16, 3).stride(2).padding(1)`), and a getter `name()`.
/// Leaves the following declarations private.
#define DPL_ARG(T, name)                             \
 public:                                             \
  auto& name(const T& new_##name) {                  \
    this->name##_ = new_##name;                      \
    return *this;                                    \
  }                                                  \
  const T& name() const noexcept { return name##_; } \
                                                     \
 private:                                            \
  T name##_
