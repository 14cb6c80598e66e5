#pragma once
// A file's bytes, read and written whole, for tests that make or damage files by hand.

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dpl::test {

using Bytes = std::vector<std::uint8_t>;

/// The bytes of the file at path (empty when it cannot be read).
inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Writes bytes to path, replacing what it held.
inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace dpl::test
