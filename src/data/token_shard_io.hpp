#pragma once
// Reading token shards piecewise, shared by TokenShard and TokenLoader (which reads single
// windows of shards too large to hold in memory).

#include <cstdint>
#include <fstream>
#include <string>

namespace dpl::data::detail {

/// Opens the shard at path for reading and checks its header as token_shard_size does (the same
/// messages, prefixed with op). Ensures: in is open and the returned count N matches the file's size.
std::int64_t open_token_shard(const char* op, const std::string& path, std::ifstream& in);

/// Reads tokens [first, first + count) of the open shard in into out (host byte order).
/// Requires the range inside the shard as opened; throws dpl::Error naming the file and the byte
/// offset when the read comes short (the file shrank since it was opened) or fails.
void read_shard_tokens(const char* op, std::ifstream& in, const std::string& path, std::int64_t first,
                       std::int64_t count, std::uint16_t* out);

}  // namespace dpl::data::detail
