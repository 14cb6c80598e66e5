#pragma once
// Internals of scatter_dataset that tests reach into.

#include <cstddef>

namespace dpl::data::detail {

/// The largest message, in bytes, scatter_dataset sends (256 MiB unless changed). Every rank must
/// hold the same value during a scatter: receivers cut their shard by it too. Tests lower it to
/// exercise the multi-message path without gigabytes of data.
std::size_t& scatter_message_bytes();

}  // namespace dpl::data::detail
