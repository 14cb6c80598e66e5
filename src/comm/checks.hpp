#pragma once
// Local argument checks shared by every communicator. They run before any communication so that
// a bad call throws on every rank that made it, instead of leaving the other ranks waiting.

#include <cstdint>
#include <string>

#include "dpl/comm/communicator.hpp"

namespace dpl::comm::detail {

/// What a collective does with its buffer's elements: reduce them (arithmetic needed) or only
/// move them (any fixed-size dtype will do).
enum class Use { kReduce, kMove };

/// "allreduce (naive)": the prefix of every message about a call.
std::string what_call(const char* collective, const std::string& comm_name);

/// Requires a defined, contiguous host tensor whose dtype the use supports; `role` names the
/// argument in the message ("buf", "send", "recv").
void check_host_buffer(const char* collective, const std::string& comm_name, const Tensor& t, const char* role,
                       Use use);
/// As check_host_buffer, but the tensor must be on a GPU when `device` is true (on the host when
/// false).
void check_buffer(const char* collective, const std::string& comm_name, const Tensor& t, const char* role, Use use,
                  bool device);
/// Requires op to be defined for t's dtype (kMean only for floating point).
void check_op(const char* collective, const std::string& comm_name, const Tensor& t, ReduceOp op);
/// Requires 0 <= root < size.
void check_root(const char* collective, const std::string& comm_name, int root, int size);
/// Requires 0 <= peer < size, peer != rank, 0 <= tag <= tag_ub.
void check_peer(const char* collective, const std::string& comm_name, int peer, int rank, int size, int tag,
                int tag_ub);
/// Requires recv to have size * send.numel() elements and send's dtype, and send either apart
/// from recv or exactly this rank's block of it. Returns true in the second case (in place).
/// `device` selects where both buffers must be (see check_buffer).
bool check_allgather(const std::string& comm_name, const Tensor& send, const Tensor& recv, int rank, int size,
                     bool device = false);
/// Requires send.numel() divisible by size, recv of send.numel() / size elements, equal dtypes,
/// and no overlap.
void check_reduce_scatter(const std::string& comm_name, const Tensor& send, const Tensor& recv, int size,
                          bool device = false);

/// True when the byte ranges of a and b intersect (both defined, contiguous).
bool overlaps(const Tensor& a, const Tensor& b);

/// buf /= divisor, elementwise, for a float32 host buffer: the second half of kMean. Every
/// communicator divides (rather than multiplies by 1/divisor) so that their means agree to the bit
/// whenever their sums do.
void divide_in_place(Tensor& buf, int divisor);

}  // namespace dpl::comm::detail
