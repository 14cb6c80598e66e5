#pragma once
// Splitting a data set held by rank 0 into one shard per rank, or giving every rank all of it.

#include <cstdint>

#include "dpl/comm/communicator.hpp"
#include "dpl/data/dataset.hpp"

namespace dpl::data {

/// Which positions of the (possibly shuffled) order of N samples one rank receives.
///
/// The order is cut into `size` contiguous blocks whose lengths differ by at most one: rank r owns
/// `unique` positions starting at `begin`, where the first N % size ranks get ceil(N/size) and the
/// rest floor(N/size). With force_equal_length every shard is then padded to `length` =
/// ceil(N/size) by continuing past its block, wrapping around the end of the order: a short
/// shard's one extra sample is the first sample of the next rank's block (the last rank's is
/// order[0]). Every sample therefore lands on some rank, at most one sample per rank is a
/// duplicate, and every rank runs the same number of iterations per epoch.
struct Shard {
  std::int64_t begin = 0;   ///< first position of this rank's block in the order
  std::int64_t unique = 0;  ///< positions [begin, begin+unique) belong to this rank alone
  std::int64_t length = 0;  ///< samples in the shard: positions begin, begin+1, ... modulo N
};

/// The shard of `rank` among `size` ranks for n samples (see Shard).
/// Requires n >= 1 when force_equal_length, n >= 0 otherwise, size >= 1, 0 <= rank < size.
/// Ensures length == ceil(n/size) when force_equal_length, length == unique otherwise.
Shard shard_of(std::int64_t n, int size, int rank, bool force_equal_length = true);

/// Distributes rank 0's data set over every rank of comm: rank 0 builds the order (0..N-1, or a
/// permutation drawn from Generator(seed) when shuffle is on), broadcasts N and the sample shape,
/// keeps its own shard and sends every other rank its shard (in messages of at most 256 MiB).
/// The remainder policy is shard_of's; with force_equal_length off, shards are the unpadded
/// blocks, whose lengths differ by at most one (what an exact evaluation wants).
///
/// Collective: every rank of comm must call it with the same shuffle, seed and
/// force_equal_length. Only rank 0's `dataset` is read; the other ranks may pass Dataset{}.
/// Requires: rank 0's data set is not empty and its samples have at most 6 dimensions.
/// Ensures: each rank gets a new data set (copies) of shard_of(N, size, rank).length samples, in
/// order-position order; the same seed gives the same shards.
/// Throws dpl::Error on every rank when rank 0's data set is empty or its samples have more than
/// 6 dimensions.
Dataset scatter_dataset(const Dataset& dataset, comm::Communicator& comm, bool shuffle = false,
                        std::uint64_t seed = 0, bool force_equal_length = true);

/// Gives every rank of comm rank 0's data set whole (for a data::GlobalBatchIterator, whose ranks
/// draw their samples from one global order): rank 0 broadcasts N and the sample shape, then the
/// samples and labels in messages of at most 256 MiB. Collective; only rank 0's `dataset` is
/// read, the other ranks may pass Dataset{}. Requires rank 0's data set non-empty with samples of
/// at most 6 dimensions; throws dpl::Error on every rank otherwise. Ensures: every rank holds
/// the same samples in the same order (rank 0 keeps its own tensors, the others get copies).
Dataset broadcast_dataset(const Dataset& dataset, comm::Communicator& comm);

}  // namespace dpl::data
