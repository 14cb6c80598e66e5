#pragma once
// Element types of tensors.

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace dpl {

/// Element type of a tensor. Math takes float32, bfloat16 and float16 (the 16-bit types computed
/// in float32 and rounded once); optimizer state is float32; int32 and int64 hold labels and
/// indices; uint8 holds 8-bit images on their way to the device (storage only: tensors of it are
/// created, copied and moved between devices, and data::normalize_images turns them into floats,
/// but math ops refuse it). New dtypes go at the end, so that the values of the others stay.
enum class DType : std::uint8_t { kFloat32, kBFloat16, kFloat16, kInt32, kInt64, kUInt8 };

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kUInt8 = DType::kUInt8;

/// Bytes per element of dtype.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  return 0;
}

/// True for the float dtypes: float32, bfloat16 and float16.
constexpr bool is_float_dtype(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16; }

/// Short name ("float32", "bfloat16", "float16", "int32", "int64", "uint8").
const char* dtype_name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

/// The DType that corresponds to the C++ type T (float, int32_t, int64_t, uint8_t).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <>
constexpr DType dtype_of<std::int32_t>() { return DType::kInt32; }
template <>
constexpr DType dtype_of<std::int64_t>() { return DType::kInt64; }
template <>
constexpr DType dtype_of<std::uint8_t>() { return DType::kUInt8; }

}  // namespace dpl
