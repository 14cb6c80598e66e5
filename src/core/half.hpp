#pragma once
// The host's conversions between float and the 16-bit float types, bit patterns in and out.
// Every host-side conversion of the library goes through these (the device has its own, in
// src/backend/cuda/device_utils.cuh). Internal header.
//
// Rounding is to nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite, and
// values beyond the 16-bit type's range round to infinity, as IEEE conversions do.

#include <cstdint>
#include <cstring>

#if !defined(__FLT16_MANT_DIG__)
#error "dpl's host float16 conversion needs the compiler's _Float16 (GCC >= 12 or Clang >= 15 on x86-64 or AArch64)"
#endif

namespace dpl::detail {

/// The float whose upper 16 bits are b (bfloat16 is float32 with the low mantissa bits cut).
inline float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// f rounded to bfloat16 (nearest even); NaN gives a quiet NaN of the same sign.
inline std::uint16_t float_to_bfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases to the even neighbour; a carry
  // out of the mantissa moves to the next binade (or to infinity), which is the correct result.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// The float value of the IEEE half-precision bit pattern h (exact).
inline float float16_to_float(std::uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, sizeof h);
  return static_cast<float>(v);
}

/// f rounded to IEEE half precision (nearest even).
inline std::uint16_t float_to_float16(float f) {
  const auto v = static_cast<_Float16>(f);
  std::uint16_t h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

}  // namespace dpl::detail
