#include "dpl/data/scatter.hpp"

#include <algorithm>
#include <numeric>

#include "data/rows.hpp"
#include "data/scatter_detail.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {
constexpr int kMaxSampleDims = 6;
}  // namespace

std::size_t& detail::scatter_message_bytes() {
  // Below MPI's 2^31-element count limit for every dtype, and a bounded staging buffer on rank 0.
  static std::size_t bytes = std::size_t{256} << 20;
  return bytes;
}

Shard shard_of(std::int64_t n, int size, int rank, bool force_equal_length) {
  DPL_CHECK(size >= 1, "shard_of: expected size >= 1, got ", size);
  DPL_CHECK(rank >= 0 && rank < size, "shard_of: rank ", rank, " is outside [0, ", size, ")");
  DPL_CHECK(force_equal_length ? n >= 1 : n >= 0, "shard_of: expected ", force_equal_length ? "n >= 1" : "n >= 0",
            " samples, got ", n);
  const std::int64_t q = n / size;
  const std::int64_t r = n % size;
  Shard s;
  s.begin = rank * q + std::min<std::int64_t>(rank, r);
  s.unique = q + (rank < r ? 1 : 0);
  s.length = force_equal_length ? (n + size - 1) / size : s.unique;
  return s;
}

namespace {

// N and the sample shape of rank 0's data set, on every rank (the others size their buffers by
// them). Throws on every rank for an empty set or samples of too many dimensions.
std::pair<std::int64_t, Shape> broadcast_header(const Dataset& dataset, comm::Communicator& comm, const char* op) {
  const int rank = comm.rank();
  const int size = comm.size();
  // Layout: [N, sample dims, extent 0, ..., extent 5].
  Tensor header = Tensor::zeros({2 + kMaxSampleDims}, kInt64);
  if (rank == 0) {
    const Shape sample = dataset.sample_shape();
    std::int64_t* h = header.data<std::int64_t>();
    h[0] = dataset.size();
    h[1] = static_cast<std::int64_t>(sample.size());
    // Too many dimensions travel as a count the receivers reject too, so every rank throws
    // instead of rank 0 alone leaving the others in the broadcast.
    for (std::size_t i = 0; i < sample.size() && i < kMaxSampleDims; ++i) h[2 + i] = sample[i];
  }
  comm.broadcast(header, 0);
  const std::int64_t* h = header.data<std::int64_t>();
  const std::int64_t n = h[0];
  DPL_CHECK(n > 0, op, ": rank 0's data set is empty; expected the full data set on rank 0 (rank ", rank, " of ",
            size, ")");
  DPL_CHECK(h[1] <= kMaxSampleDims, op, ": rank 0's samples have ", h[1], " dimensions; at most ", kMaxSampleDims,
            " are supported (rank ", rank, " of ", size, ")");
  return {n, Shape(h + 2, h + 2 + h[1])};
}

}  // namespace

Dataset broadcast_dataset(const Dataset& dataset, comm::Communicator& comm) {
  const auto [n, sample] = broadcast_header(dataset, comm, "broadcast_dataset");
  const bool root = comm.rank() == 0;
  Shape rows{n};
  rows.insert(rows.end(), sample.begin(), sample.end());
  const std::int64_t row = shape_numel(sample);
  Tensor x = root ? dataset.images() : Tensor::empty(rows, kFloat32);
  Tensor y = root ? dataset.labels() : Tensor::empty({n}, kInt32);
  // In messages of bounded size, as scatter_dataset sends: below MPI's element count limit.
  const auto row_bytes = static_cast<std::size_t>(std::max<std::int64_t>(row, 1)) * sizeof(float);
  const std::int64_t per_message =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(detail::scatter_message_bytes() / row_bytes));
  for (std::int64_t c = 0; c < n; c += per_message) {
    const std::int64_t count = std::min(per_message, n - c);
    Shape part{count};
    part.insert(part.end(), sample.begin(), sample.end());
    Tensor xs = x.view_range(c * row, part);
    Tensor ys = y.view_range(c, {count});
    comm.broadcast(xs, 0);
    comm.broadcast(ys, 0);
  }
  return root ? dataset : Dataset(x, y);
}

Dataset scatter_dataset(const Dataset& dataset, comm::Communicator& comm, bool shuffle, std::uint64_t seed,
                        bool force_equal_length) {
  const char* op = "scatter_dataset";
  const int rank = comm.rank();
  const int size = comm.size();

  // Only rank 0 knows N and the sample shape; every rank needs them to size its receive buffers.
  const auto [n, sample] = broadcast_header(dataset, comm, op);
  const std::int64_t row = shape_numel(sample);

  auto rows_shape = [&](std::int64_t count) {
    Shape s{count};
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
  };
  // Both sides cut a shard into the same messages, so each recv matches its send in size.
  const auto row_bytes = static_cast<std::size_t>(std::max<std::int64_t>(row, 1)) * sizeof(float);
  const std::int64_t rows_per_message =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(detail::scatter_message_bytes() / row_bytes));

  const Shard mine = shard_of(n, size, rank, force_equal_length);
  Tensor x = Tensor::empty(rows_shape(mine.length), kFloat32);
  Tensor y = Tensor::empty({mine.length}, kInt32);

  if (rank == 0) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    if (shuffle) {
      Generator gen(seed);
      order = permutation(n, gen);
    } else {
      std::iota(order.begin(), order.end(), std::int64_t{0});
    }
    auto indices_of = [&](const Shard& s) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(s.length));
      for (std::int64_t k = 0; k < s.length; ++k) idx[static_cast<std::size_t>(k)] = order[static_cast<std::size_t>((s.begin + k) % n)];
      return idx;
    };
    // Rank 0's shard is the longest, so a staging buffer of its size fits every message.
    const std::int64_t stage_rows = std::min(rows_per_message, shard_of(n, size, 0, force_equal_length).length);
    Tensor stage_x = Tensor::empty(rows_shape(stage_rows), kFloat32);
    Tensor stage_y = Tensor::empty({stage_rows}, kInt32);
    for (int dst = 1; dst < size; ++dst) {
      const std::vector<std::int64_t> idx = indices_of(shard_of(n, size, dst, force_equal_length));
      const auto len = static_cast<std::int64_t>(idx.size());
      for (std::int64_t c = 0; c < len; c += rows_per_message) {
        const std::int64_t count = std::min(rows_per_message, len - c);
        detail::copy_rows(dataset, idx.data() + c, count, stage_x.data<float>(), stage_y.data<std::int32_t>());
        comm.send(stage_x.view_range(0, rows_shape(count)), dst, comm::kScatterSamplesTag);
        comm.send(stage_y.view_range(0, {count}), dst, comm::kScatterLabelsTag);
      }
    }
    const std::vector<std::int64_t> idx = indices_of(mine);
    detail::copy_rows(dataset, idx.data(), mine.length, x.data<float>(), y.data<std::int32_t>());
  } else {
    for (std::int64_t c = 0; c < mine.length; c += rows_per_message) {
      const std::int64_t count = std::min(rows_per_message, mine.length - c);
      Tensor xs = x.view_range(c * row, rows_shape(count));
      Tensor ys = y.view_range(c, {count});
      comm.recv(xs, 0, comm::kScatterSamplesTag);
      comm.recv(ys, 0, comm::kScatterLabelsTag);
    }
  }
  return Dataset(x, y);
}

}  // namespace dpl::data
