#pragma once
// A 64-bit hash whose value depends only on the bytes hashed: the same in every process, build,
// compiler and platform, which std::hash does not promise. Ranks compare such hashes to find out
// whether they agree, so it must never change between the builds of one job.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dpl::detail {

/// FNV-1a, 64 bits. Ensures equal byte strings hash equal in every process; distinct strings
/// collide with probability about 2^-64, which is fine for detecting mistakes, not for security.
class StableHash {
 public:
  /// Mixes n bytes at data into the hash (n == 0 leaves it as it is).
  StableHash& add_bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      value_ ^= p[i];
      value_ *= kPrime;
    }
    return *this;
  }
  /// Mixes the characters of s.
  StableHash& add(std::string_view s) { return add_bytes(s.data(), s.size()); }
  /// The hash of everything added so far.
  std::uint64_t value() const { return value_; }

 private:
  static constexpr std::uint64_t kOffsetBasis = 14695981039346656037ull;
  static constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t value_ = kOffsetBasis;
};

/// The stable hash of the characters of s.
inline std::uint64_t stable_hash(std::string_view s) { return StableHash().add(s).value(); }

}  // namespace dpl::detail
