#pragma once
// Token shards: llm.c's .bin files of uint16 tokens, so that files written here train there and
// the other way round.
//
//   bytes 0..1023     256 little-endian int32: [0] magic 20240520, [1] version 1,
//                     [2] number of tokens N, [3..255] zero
//   bytes 1024..      N little-endian uint16 tokens

#include <cstdint>
#include <string>
#include <vector>

namespace dpl::data {

/// Header field 0 of a token shard.
inline constexpr std::int32_t kTokenShardMagic = 20240520;
/// Header field 1 of a token shard (llm.c's version 1: uint16 tokens).
inline constexpr std::int32_t kTokenShardVersion = 1;
/// Bytes of the header: 256 int32 values.
inline constexpr std::int64_t kTokenShardHeaderBytes = 1024;

/// Writes tokens as a token shard at path, atomically: the bytes go to path + ".partial" beside
/// it, which is renamed to path once complete, so a reader never sees a partial shard and a failed
/// write leaves no file at path (an existing file there is replaced only on success).
/// Requires: at most 2^31 - 1 tokens (the count is an int32) and a writable folder.
/// Throws dpl::Error naming the path and the system's reason when a write or the rename fails.
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

/// Reads and checks a token shard's header, without reading its tokens.
/// Ensures: the number of tokens N, with the file exactly 1024 + 2·N bytes long.
/// Throws dpl::Error naming the file, the header field (magic, version, token count), what was
/// expected and what came: a file that cannot be opened or is a folder, a file shorter than the
/// header, a bad magic number, another version, a negative count, or a file size other than
/// 1024 + 2·N (truncated, or with trailing bytes). Header fields 3..255 are not checked.
std::int64_t token_shard_size(const std::string& path);

/// A token shard read into memory.
class TokenShard {
 public:
  /// Reads the shard at path. Requires what token_shard_size requires; throws as it does, and
  /// names the file when reading the tokens fails.
  explicit TokenShard(std::string path);

  /// The file this shard was read from.
  const std::string& path() const { return path_; }
  /// Number of tokens N.
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  /// The N tokens, in file order.
  const std::vector<std::uint16_t>& tokens() const { return tokens_; }
  /// Token i. Requires 0 <= i < size(); throws dpl::Error otherwise.
  std::uint16_t at(std::int64_t i) const;

 private:
  std::string path_;
  std::vector<std::uint16_t> tokens_;
};

}  // namespace dpl::data
