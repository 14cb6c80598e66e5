#include "dpl/data/token_shard.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "data/token_shard_io.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {

namespace fs = std::filesystem;

std::string system_reason() { return errno != 0 ? std::strerror(errno) : "unknown reason"; }

// The format is little-endian whatever the host is: bytes are assembled explicitly.
std::int32_t le32(const unsigned char* p) {
  const std::uint32_t v = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                          static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
  return static_cast<std::int32_t>(v);
}

void put_le32(unsigned char* p, std::int32_t value) {
  const auto v = static_cast<std::uint32_t>(value);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<unsigned char>(v >> (8 * k));
}

}  // namespace

namespace detail {

std::int64_t open_token_shard(const char* op, const std::string& path, std::ifstream& in) {
  // Linux opens a folder as a stream whose length reads as huge; name it instead.
  std::error_code ec;
  DPL_CHECK(!fs::is_directory(path, ec), op, ": ", path, " is a folder; expected a token shard (.bin) file");
  errno = 0;
  in.open(path, std::ios::binary);
  if (!in) DPL_FAIL(op, ": cannot open ", path, ": ", system_reason());
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  DPL_CHECK(file_size >= 0, op, ": cannot find the size of ", path);
  DPL_CHECK(file_size >= kTokenShardHeaderBytes, op, ": ", path, " is truncated: it holds ", file_size,
            " bytes, but a token shard starts with a header of ", kTokenShardHeaderBytes,
            " bytes (256 little-endian int32)");
  unsigned char header[12];
  in.seekg(0);
  in.read(reinterpret_cast<char*>(header), sizeof header);
  DPL_CHECK(in.gcount() == static_cast<std::streamsize>(sizeof header), op, ": reading the header of ", path,
            " failed: ", system_reason());

  const std::int32_t magic = le32(header), version = le32(header + 4), count = le32(header + 8);
  DPL_CHECK(magic == kTokenShardMagic, op, ": ", path, ": header field 0 (magic) is ", magic, "; expected ",
            kTokenShardMagic, " (an llm.c token shard)");
  DPL_CHECK(version == kTokenShardVersion, op, ": ", path, ": header field 1 (version) is ", version,
            "; expected ", kTokenShardVersion, " (uint16 tokens)");
  DPL_CHECK(count >= 0, op, ": ", path, ": header field 2 (token count) is ", count, "; expected a count >= 0");
  const std::int64_t expected = kTokenShardHeaderBytes + 2 * static_cast<std::int64_t>(count);
  DPL_CHECK(file_size == expected, op, ": ", path, ": header field 2 (token count) is ", count,
            ", so the file should hold ", kTokenShardHeaderBytes, " + 2 x ", count, " = ", expected,
            " bytes, but it holds ", file_size, file_size < expected ? " (truncated)" : " (trailing bytes)");
  return count;
}

void read_shard_tokens(const char* op, std::ifstream& in, const std::string& path, std::int64_t first,
                       std::int64_t count, std::uint16_t* out) {
  const std::int64_t offset = kTokenShardHeaderBytes + 2 * first;
  // Small enough for any thread's stack; a window of GPT-2 (1025 tokens) is one chunk.
  constexpr std::int64_t kChunk = 4096;
  unsigned char bytes[2 * kChunk];
  in.clear();
  in.seekg(offset);
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t n = std::min(kChunk, count - done);
    errno = 0;
    in.read(reinterpret_cast<char*>(bytes), static_cast<std::streamsize>(2 * n));
    const std::int64_t got = in.gcount();
    DPL_CHECK(got == 2 * n, op, ": reading ", 2 * n, " bytes of tokens at byte offset ", offset + 2 * done,
              " of ", path, " returned ", got, in.eof() ? " (the file is shorter than when it was opened)" : "",
              ": ", system_reason());
    for (std::int64_t i = 0; i < n; ++i)
      out[done + i] = static_cast<std::uint16_t>(bytes[2 * i] | static_cast<unsigned>(bytes[2 * i + 1]) << 8);
    done += n;
  }
}

}  // namespace detail

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  const char* op = "write_token_shard";
  DPL_CHECK(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), op, ": ", path,
            ": a shard holds at most ", std::numeric_limits<std::int32_t>::max(),
            " tokens (its count is an int32), got ", tokens.size());
  const std::string partial = path + ".partial";
  // Removes the partial file on every way out but success.
  struct RemoveUnlessDone {
    const std::string& path;
    bool done = false;
    ~RemoveUnlessDone() {
      std::error_code ignored;
      if (!done) fs::remove(path, ignored);
    }
  } cleanup{partial};

  errno = 0;
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  DPL_CHECK(out.good(), op, ": cannot write ", partial, " (for ", path, "): ", system_reason());
  unsigned char header[kTokenShardHeaderBytes] = {};
  put_le32(header, kTokenShardMagic);
  put_le32(header + 4, kTokenShardVersion);
  put_le32(header + 8, static_cast<std::int32_t>(tokens.size()));
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<unsigned char> bytes(2 * kChunk);
  for (std::size_t done = 0; done < tokens.size() && out.good();) {
    const std::size_t n = std::min(kChunk, tokens.size() - done);
    for (std::size_t i = 0; i < n; ++i) {
      bytes[2 * i] = static_cast<unsigned char>(tokens[done + i] & 0xFF);
      bytes[2 * i + 1] = static_cast<unsigned char>(tokens[done + i] >> 8);
    }
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(2 * n));
    done += n;
  }
  out.close();
  DPL_CHECK(!out.fail(), op, ": writing ", partial, " (for ", path, ") failed: ", system_reason());
  std::error_code renamed;
  fs::rename(partial, path, renamed);
  DPL_CHECK(!renamed, op, ": cannot rename ", partial, " to ", path, ": ", renamed.message());
  cleanup.done = true;
}

std::int64_t token_shard_size(const std::string& path) {
  std::ifstream in;
  return detail::open_token_shard("token_shard_size", path, in);
}

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  const char* op = "TokenShard";
  std::ifstream in;
  const std::int64_t n = detail::open_token_shard(op, path_, in);
  tokens_.resize(static_cast<std::size_t>(n));
  detail::read_shard_tokens(op, in, path_, 0, n, tokens_.data());
}

std::uint16_t TokenShard::at(std::int64_t i) const {
  DPL_CHECK(i >= 0 && i < size(), "TokenShard::at: expected an index in [0, ", size(), ") for ", path_, ", got ", i);
  return tokens_[static_cast<std::size_t>(i)];
}

}  // namespace dpl::data
