// bench_allreduce: allreduce bandwidth of dpl's communicators, in nccl-tests' format.
//
//   mpiexec -n 2 bench_allreduce -b 8 -e 1G -f 4 --sizes 102228128 --raw
//
// One table per communicator (and, with --raw, one for a bare ncclAllReduce over all ranks, the
// ceiling): size count type redop | time algbw busbw #wrong. time is the mean over -n iterations
// (after -w warm-up ones) of the slowest rank, in us; algbw = bytes / time; busbw = algbw *
// 2(p-1)/p. With -c 1 the buffer is refilled with small integers and reduced once more, and
// #wrong counts the elements (over all ranks) that differ from the exact sum. Buffers are on the
// GPU (rank on its host % GPUs) when there is one, else on the host. Rank 0 prints; the last
// lines ("summary comm=... bytes=... busbw=...") are for scripts.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/dpl.hpp"

#if DPL_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace {

std::int64_t parse_bytes(const std::string& s) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  double mult = 1;
  if (pos < s.size()) {
    switch (s[pos]) {
      case 'K': case 'k': mult = 1024.0; break;
      case 'M': case 'm': mult = 1024.0 * 1024; break;
      case 'G': case 'g': mult = 1024.0 * 1024 * 1024; break;
      default: throw dpl::Error("bench_allreduce: expected a size like 8, 64K, 1M or 1G, got '" + s + "'");
    }
  }
  return static_cast<std::int64_t>(v * mult);
}

struct Row {
  std::string comm;
  std::int64_t bytes;
  double time_us, algbw, busbw;
  long long wrong;
};

int g_rank = 0, g_size = 1;

double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

long long sum_over_ranks(long long x) {
  long long s = 0;
  MPI_Allreduce(&x, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

// Small integers, so the sum over ranks is exact in float.
std::vector<float> pattern(std::int64_t n, int rank) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i + rank) % 7);
  return v;
}

long long count_wrong(const std::vector<float>& got, int ranks) {
  long long bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    float want = 0;
    for (int r = 0; r < ranks; ++r) want += static_cast<float>((static_cast<std::int64_t>(i) + r) % 7);
    bad += got[i] != want;
  }
  return bad;
}

void print_header(const std::string& title) {
  if (g_rank != 0) return;
  std::printf("#\n# %s\n", title.c_str());
  std::printf("# %12s %12s %8s %6s   %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time", "algbw", "busbw",
              "#wrong");
  std::printf("# %12s %12s %8s %6s   %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

Row make_row(const std::string& comm, std::int64_t bytes, double seconds, long long wrong, bool checked) {
  Row r{comm, bytes, seconds * 1e6, 0, 0, wrong};
  r.algbw = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  r.busbw = r.algbw * 2.0 * (g_size - 1) / g_size;
  if (g_rank == 0) {
    char w[16];
    if (checked) {
      std::snprintf(w, sizeof w, "%lld", wrong);
    } else {
      std::snprintf(w, sizeof w, "N/A");
    }
    std::printf("  %12lld %12lld %8s %6s   %10.1f %8.2f %8.2f %7s\n", static_cast<long long>(bytes),
                static_cast<long long>(bytes / 4), "float", "sum", r.time_us, r.algbw, r.busbw, w);
    std::fflush(stdout);
  }
  return r;
}

// Iterations for one size: -n, but fewer when one iteration is so slow that -n of them would take
// longer than the limit (the host-staged paths at 1 GiB), so a whole sweep stays short.
int iterations_for(double one_iter_seconds, int iters, double limit) {
  if (limit <= 0 || one_iter_seconds <= 0) return iters;
  return std::max(1, std::min(iters, static_cast<int>(limit / one_iter_seconds)));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl allreduce bandwidth (nccl-tests format)"};
  std::string min_s = "8", max_s = "128M";
  double factor = 2;
  int iters = 20, warmup = 5, check = 1;
  std::string comms;
  bool raw = false;
  std::vector<std::string> extra;
  double limit = 2.0;
  app.add_option("-b,--minbytes", min_s, "smallest size in bytes (K, M, G suffixes)");
  app.add_option("-e,--maxbytes", max_s, "largest size in bytes");
  app.add_option("-f,--stepfactor", factor, "multiply the size by this between rows")->check(CLI::Range(1.01, 1e6));
  app.add_option("-n,--iters", iters, "timed iterations per size")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", warmup, "untimed iterations before")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", check, "1: check the result of one more allreduce (#wrong)");
  app.add_option("--comm", comms, "communicators, comma-separated (default: every one of the build)");
  app.add_flag("--raw", raw, "also time a bare ncclAllReduce over all ranks (NCCL builds, one GPU per rank)");
  app.add_option("--sizes", extra, "extra sizes in bytes (e.g. 102228128)")->delimiter(',');
  app.add_option("--time-limit", limit, "seconds of timed iterations per size at most (0: always -n)");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> names;
  if (comms.empty()) {
    names = dpl::comm::communicator_names();
  } else {
    std::size_t start = 0;
    while (start <= comms.size()) {
      const std::size_t end = std::min(comms.find(',', start), comms.size());
      if (end > start) names.push_back(comms.substr(start, end - start));
      start = end + 1;
    }
  }
  // The first communicator initialises MPI; later ones are created in the loop.
  auto first = dpl::comm::create_communicator("naive");
  g_rank = first->rank();
  g_size = first->size();
  MPI_Comm shared;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(shared, &local_rank);
  MPI_Comm_size(shared, &local_size);
  MPI_Comm_free(&shared);
  const int gpus = dpl::cuda_device_count();
  const dpl::Device dev = gpus > 0 ? dpl::Device::cuda(local_rank % gpus) : dpl::Device::cpu();
  if (gpus > 0) dpl::cuda::set_device(dev.index);
  // single_node refuses several nodes; skip it there instead of failing the whole sweep.
  if (first->inter_size() > 1)
    names.erase(std::remove(names.begin(), names.end(), "single_node"), names.end());
  // Likewise two_dimensional refuses nodes of unequal sizes.
  if (!dpl::comm::even_nodes(first->topology()))
    names.erase(std::remove(names.begin(), names.end(), "two_dimensional"), names.end());

  std::vector<std::int64_t> sizes;
  for (double b = static_cast<double>(parse_bytes(min_s)); b <= static_cast<double>(parse_bytes(max_s)); b *= factor)
    sizes.push_back(std::max<std::int64_t>(4, static_cast<std::int64_t>(b) / 4 * 4));
  for (const auto& s : extra) sizes.push_back(parse_bytes(s) / 4 * 4);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  if (g_rank == 0) {
    std::string per_node;  // "2" for even nodes, "2,1" for uneven ones
    for (const int n : first->topology().node_sizes) {
      if (!per_node.empty() && dpl::comm::even_nodes(first->topology())) break;
      per_node += (per_node.empty() ? "" : ",") + std::to_string(n);
    }
    std::printf("# dpl bench_allreduce: %d ranks, %d nodes (%s ranks per node), buffers on %s, iters %d, warmup %d, "
                "check %d\n",
                g_size, first->inter_size(), per_node.c_str(), gpus > 0 ? "GPU" : "host", iters, warmup, check);
  }
  auto sync = [&] {
    if (dev.is_cuda()) dpl::cuda::synchronize(dev.index);
  };
  std::vector<Row> rows;

  for (const auto& name : names) {
    auto comm = dpl::comm::create_communicator(name);
    print_header("communicator " + name);
    for (std::int64_t bytes : sizes) {
      const std::int64_t n = bytes / 4;
      dpl::Tensor buf = dpl::Tensor::zeros({n}, dpl::TensorOptions(dpl::kFloat32, dev));
      for (int i = 0; i < warmup; ++i) comm->allreduce(buf);
      sync();
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      comm->allreduce(buf);
      sync();
      const int it = iterations_for(max_over_ranks(MPI_Wtime() - t0), iters, limit);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (int i = 0; i < it; ++i) comm->allreduce(buf);
      sync();
      const double t = max_over_ranks((MPI_Wtime() - t0) / it);
      long long wrong = 0;
      if (check) {
        buf.copy_(dpl::Tensor::from_vector<float>(pattern(n, g_rank), {n}));
        comm->allreduce(buf);
        wrong = sum_over_ranks(count_wrong(buf.to_vector<float>(), g_size));
      }
      rows.push_back(make_row(name, bytes, t, wrong, check != 0));
    }
  }

#if DPL_WITH_NCCL
  if (raw && gpus > 0) {
    if (local_size > gpus) {
      if (g_rank == 0) std::printf("#\n# raw NCCL skipped: %d ranks share %d GPUs on a host\n", local_size, gpus);
    } else {
      ncclUniqueId id;
      if (g_rank == 0) ncclGetUniqueId(&id);
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      ncclComm_t nc;
      if (ncclCommInitRank(&nc, g_size, id, g_rank) != ncclSuccess) throw dpl::Error("bench_allreduce: ncclCommInitRank failed");
      cudaStream_t st;
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
      print_header("raw ncclAllReduce (all ranks, in place)");
      for (std::int64_t bytes : sizes) {
        const std::int64_t n = bytes / 4;
        dpl::Tensor buf = dpl::Tensor::zeros({n}, dpl::TensorOptions(dpl::kFloat32, dev));
        dpl::cuda::synchronize(dev.index);
        float* p = buf.data<float>();
        auto once = [&] { ncclAllReduce(p, p, static_cast<std::size_t>(n), ncclFloat32, ncclSum, nc, st); };
        for (int i = 0; i < warmup; ++i) once();
        cudaStreamSynchronize(st);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) once();
        cudaStreamSynchronize(st);
        const double t = max_over_ranks((MPI_Wtime() - t0) / iters);
        long long wrong = 0;
        if (check) {
          buf.copy_(dpl::Tensor::from_vector<float>(pattern(n, g_rank), {n}));
          dpl::cuda::synchronize(dev.index);
          once();
          cudaStreamSynchronize(st);
          wrong = sum_over_ranks(count_wrong(buf.to_vector<float>(), g_size));
        }
        rows.push_back(make_row("raw_nccl", bytes, t, wrong, check != 0));
      }
      ncclCommDestroy(nc);
      cudaStreamDestroy(st);
    }
  }
#else
  if (raw && g_rank == 0) std::printf("#\n# raw NCCL: not in this build (DPL_WITH_NCCL=0)\n");
#endif

  if (g_rank == 0) {
    std::printf("#\n");
    for (const auto& r : rows)
      std::printf("summary comm=%s bytes=%lld time_us=%.1f algbw=%.3f busbw=%.3f wrong=%lld\n", r.comm.c_str(),
                  static_cast<long long>(r.bytes), r.time_us, r.algbw, r.busbw, r.wrong);
  }
  return 0;
}
