// bench_p2p: point-to-point bandwidth and latency in OSU's format, between ranks 0 and 1.
//
//   mpiexec -n 2 bench_p2p [--max-bytes 256M]
//
// Sections: MPI on host memory (MPI_Isend/MPI_Irecv windows, OSU's osu_bw and osu_latency
// method); dpl send/recv of device buffers through the "naive" communicator (MPI, staged through
// pinned memory unless MPI is CUDA-aware) and, in NCCL builds, through "pure_nccl" (ncclSend/Recv);
// and, on rank 0 alone when it sees two GPUs, cudaMemcpyPeer without and with peer access.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/dpl.hpp"

#if DPL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

int g_rank = 0;

int iters_for(std::int64_t bytes) { return bytes <= (1 << 16) ? 200 : bytes <= (1 << 22) ? 40 : 8; }

void header(const char* what, const char* unit) {
  if (g_rank != 0) return;
  std::printf("\n# OSU MPI %s Test (dpl bench_p2p)\n# %s\n", unit[0] == 'B' ? "Bandwidth" : "Latency", what);
  std::printf("# Size      %s\n", unit[0] == 'B' ? "Bandwidth (MB/s)" : "Latency (us)");
}

void line(std::int64_t bytes, double v) {
  if (g_rank == 0) std::printf("%-10lld %.2f\n", static_cast<long long>(bytes), v);
  std::fflush(stdout);
}

// OSU's osu_bw: a window of non-blocking sends, one short acknowledgement back.
double mpi_bw(char* s, char* r, std::int64_t bytes, int window) {
  const int iters = iters_for(bytes);
  std::vector<MPI_Request> req(static_cast<std::size_t>(window));
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    for (int w = 0; w < window; ++w) {
      if (g_rank == 0)
        MPI_Isend(s, static_cast<int>(bytes), MPI_BYTE, 1, 100, MPI_COMM_WORLD, &req[static_cast<std::size_t>(w)]);
      else
        MPI_Irecv(r, static_cast<int>(bytes), MPI_BYTE, 0, 100, MPI_COMM_WORLD, &req[static_cast<std::size_t>(w)]);
    }
    MPI_Waitall(window, req.data(), MPI_STATUSES_IGNORE);
    char ack = 0;
    if (g_rank == 0) MPI_Recv(&ack, 1, MPI_BYTE, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else MPI_Send(&ack, 1, MPI_BYTE, 0, 101, MPI_COMM_WORLD);
  }
  const double t = MPI_Wtime() - t0;
  return static_cast<double>(bytes) * window * iters / t / 1e6;
}

// OSU's osu_latency: ping-pong, half the round trip.
double mpi_latency(char* s, char* r, std::int64_t bytes) {
  const int iters = iters_for(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (g_rank == 0) {
      MPI_Send(s, static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(r, static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(r, static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(s, static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / iters / 2 * 1e6;
}

// dpl's send/recv on device buffers: ping-pong; bandwidth from the one-way time.
double comm_latency(dpl::comm::Communicator& c, dpl::Tensor& buf) {
  const int iters = iters_for(buf.nbytes());
  c.barrier();
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (g_rank == 0) {
      c.send(buf, 1, 3);
      c.recv(buf, 1, 3);
    } else {
      c.recv(buf, 0, 3);
      c.send(buf, 0, 3);
    }
  }
  return (MPI_Wtime() - t0) / iters / 2 * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl point-to-point bandwidth and latency (OSU format)"};
  std::int64_t max_bytes = std::int64_t{256} << 20;
  app.add_option("--max-bytes", max_bytes, "largest message in bytes (default 256 MiB)");
  CLI11_PARSE(app, argc, argv);

  auto naive = dpl::comm::create_communicator("naive");
  g_rank = naive->rank();
  if (naive->size() != 2) {
    if (g_rank == 0) std::fprintf(stderr, "bench_p2p: run with exactly 2 ranks (mpiexec -n 2), got %d\n", naive->size());
    return 1;
  }
  std::vector<std::int64_t> sizes;
  for (std::int64_t b = 1; b <= max_bytes; b *= 2) sizes.push_back(b);

  std::vector<char> hs(static_cast<std::size_t>(max_bytes), 1), hr(static_cast<std::size_t>(max_bytes), 0);
  header("MPI, host memory", "Bandwidth");
  for (auto b : sizes) line(b, mpi_bw(hs.data(), hr.data(), b, b <= (1 << 20) ? 64 : 4));
  header("MPI, host memory", "Latency");
  for (auto b : sizes) line(b, mpi_latency(hs.data(), hr.data(), b));

  const int gpus = dpl::cuda_device_count();
  if (gpus == 0) {
    if (g_rank == 0) std::printf("\n# no GPU: device sections skipped\n");
    return 0;
  }
  MPI_Comm shared;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  int local = 0;
  MPI_Comm_rank(shared, &local);
  MPI_Comm_free(&shared);
  const dpl::Device dev = dpl::Device::cuda(local % gpus);
  dpl::cuda::set_device(dev.index);

  std::vector<std::string> names = {"naive"};
  if (DPL_WITH_NCCL) names.push_back("pure_nccl");
  for (const auto& name : names) {
    auto c = name == "naive" ? std::move(naive) : dpl::comm::create_communicator(name);
    const std::string what = "dpl send/recv, device memory, communicator " + name +
                             (name == "naive" ? " (MPI staged through pinned memory)" : " (NCCL)");
    std::vector<double> lat;
    for (auto b : sizes) {
      dpl::Tensor buf = dpl::Tensor::zeros({(b + 3) / 4}, dpl::TensorOptions(dpl::kFloat32, dev));
      lat.push_back(comm_latency(*c, buf));
    }
    // Device buffers are float32 tensors: sizes round up to whole floats.
    auto rounded = [&](std::size_t i) { return (sizes[i] + 3) / 4 * 4; };
    header(what.c_str(), "Bandwidth");
    for (std::size_t i = 0; i < sizes.size(); ++i) line(rounded(i), static_cast<double>(rounded(i)) / lat[i]);
    header(what.c_str(), "Latency");
    for (std::size_t i = 0; i < sizes.size(); ++i) line(rounded(i), lat[i]);
    if (name == "naive") naive = std::move(c);
  }

#if DPL_WITH_CUDA
  if (g_rank == 0 && gpus >= 2) {
    void *a = nullptr, *b = nullptr;
    cudaSetDevice(0);
    cudaMalloc(&a, static_cast<std::size_t>(max_bytes));
    cudaSetDevice(1);
    cudaMalloc(&b, static_cast<std::size_t>(max_bytes));
    cudaSetDevice(0);
    int can = 0;
    cudaDeviceCanAccessPeer(&can, 0, 1);
    for (int peer : {0, 1}) {
      if (peer && !can) {
        std::printf("\n# cudaMemcpyPeer with peer access: not possible between GPU 0 and 1\n");
        break;
      }
      if (peer) {
        cudaDeviceEnablePeerAccess(1, 0);
        cudaGetLastError();
      } else {
        cudaDeviceDisablePeerAccess(1);
        cudaGetLastError();
      }
      header(peer ? "cudaMemcpyPeer GPU 0 -> GPU 1, peer access on (rank 0)"
                  : "cudaMemcpyPeer GPU 0 -> GPU 1, peer access off (rank 0)", "Bandwidth");
      for (auto s : sizes) {
        const int iters = iters_for(s);
        cudaMemcpyPeer(b, 1, a, 0, static_cast<std::size_t>(s));
        cudaDeviceSynchronize();
        const double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) cudaMemcpyPeerAsync(b, 1, a, 0, static_cast<std::size_t>(s), nullptr);
        cudaDeviceSynchronize();
        line(s, static_cast<double>(s) * iters / (MPI_Wtime() - t0) / 1e6);
      }
    }
    cudaFree(a);
    cudaSetDevice(1);
    cudaFree(b);
  }
#endif
  return 0;
}
