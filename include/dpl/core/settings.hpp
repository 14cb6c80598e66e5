#pragma once
// The environment variables dpl reads: every DPL_* variable is parsed here, strictly, and
// listed in one table (settings_table(), and docs/configuration.md). No other part of dpl reads
// the environment for its own configuration.

#include <optional>
#include <string>
#include <vector>

namespace dpl {

/// How reports draw on a stream (DPL_OUTPUT).
enum class OutputSetting { kAuto, kPlain, kTerminal };
/// How the host allreduce of hierarchical and two_dimensional writes the node's shared window:
/// the kind of stores each node measures to be faster, or always ordinary (cached) or streaming
/// (non-temporal) ones. See docs/communicators.md ("Host memory: the node's shared window").
enum class WindowStoresSetting { kMeasured, kCached, kStreaming };
/// Which kernels run scaled_dot_product_attention on a GPU (DPL_ATTENTION): cuDNN's fused
/// flash-attention kernels where the build has them and cuDNN accepts the problem, dpl's own
/// otherwise (auto); or always dpl's own (plain). See docs/ops.md ("Attention").
enum class AttentionSetting { kAuto, kPlain };

/// dpl's configuration from the environment. A variable that is unset or empty takes its default.
/// The most host threads per process DPL_NUM_THREADS may ask for. Far more than any host has
/// cores: a larger value is a typo, and would ask OpenMP for more threads than it starts (the
/// process then ran with fewer, without a word).
constexpr int kMaxNumThreads = 1024;

struct Settings {
  /// DPL_RANKS_PER_NODE: virtual nodes instead of the real ones (empty: unset, the real nodes).
  /// One element k: nodes of k ranks each ("2"); several: the size of each node in rank order
  /// ("2,1": ranks 0-1 form node 0, rank 2 node 1), for uneven nodes.
  std::vector<int> ranks_per_node;
  /// DPL_NUM_THREADS: host threads per process, 1 to kMaxNumThreads (unset: cores / processes on
  /// the host, unless OMP_NUM_THREADS is set, which then decides). A value out of range is refused.
  std::optional<int> num_threads;
  /// Whether OMP_NUM_THREADS is set (its value is OpenMP's to parse).
  bool omp_num_threads_set = false;
  /// DPL_CPU_NO_CACHING=1: every large host block goes back to the system when freed.
  bool cpu_caching = true;
  /// DPL_CUDA_NO_CACHING=1: every device allocation goes to the driver (for memory checkers).
  bool cuda_caching = true;
  /// DPL_CUDA_TF32=1: matrix products may use TF32 tensor cores from the start.
  bool cuda_tf32 = false;
  /// DPL_CUDNN_BENCHMARK=0/1: cuDNN convolutions time the candidate algorithms once per shape
  /// and keep the fastest (1), or take the first deterministic one of cuDNN's heuristics (0).
  bool cudnn_benchmark = true;
  /// DPL_CUDNN_CANDIDATES: how many of cuDNN's heuristic plans that search times per shape.
  int cudnn_candidates = 12;
  /// DPL_CUDNN_WORKSPACE_SLACK: percent slower than the fastest timed plan that a plan with a
  /// smaller workspace may be and still be chosen (0: always the fastest).
  int cudnn_workspace_slack = 3;
  /// DPL_CUTLASS=0/1: 1x1 convolutions with batch-norm statistics run on dpl's CUTLASS product
  /// where the build and the GPU have it (1), or on cuDNN (0).
  bool cutlass = true;
  /// DPL_CUDA_DEVICE: the GPU of every process ("1"), or a list indexed by the local rank ("0,2").
  std::vector<int> cuda_devices;
  /// DPL_MPI_CUDA_AWARE=0/1: whether MPI may be handed device memory (unset: ask the MPI library).
  std::optional<bool> mpi_cuda_aware;
  /// DPL_OUTPUT=plain|terminal: how reports draw (unset: a terminal when the stream is one).
  OutputSetting output = OutputSetting::kAuto;
  /// DPL_STAGING_CHUNK_BYTES: bytes per chunk when device buffers go through pinned host memory.
  int staging_chunk_bytes = 4 << 20;
  /// DPL_STAGING_SLOTS: pinned chunks in flight at once (at least 2).
  int staging_slots = 4;
  /// DPL_COLLECTIVE_TIMEOUT: seconds a collective may wait for the other ranks before the
  /// watchdog reports it and aborts the job (0: no watchdog). See docs/reliability.md.
  int collective_timeout = 600;
  /// DPL_WINDOW_STORES=measured|cached|streaming: the stores of the host allreduce's shared window.
  WindowStoresSetting window_stores = WindowStoresSetting::kMeasured;
  /// DPL_ATTENTION=auto|plain: the kernels of scaled_dot_product_attention on a GPU.
  AttentionSetting attention = AttentionSetting::kAuto;
};

/// One row of the table of variables: its name, default and meaning.
struct SettingInfo {
  const char* name;
  const char* default_value;
  const char* meaning;
};

/// The settings of this process: the environment as it is at the call, parsed (a few lookups;
/// callers on hot paths read it once and keep the value). Throws dpl::Error naming the variable,
/// the value and what is accepted when a variable is malformed.
Settings settings();

/// Parses settings from `lookup`, which returns a variable's value or null when it is unset
/// (settings() passes std::getenv). Throws dpl::Error as settings() does.
Settings parse_settings(const char* (*lookup)(const char* name));

/// Every variable parse_settings reads, in the order of the docs' table.
const std::vector<SettingInfo>& settings_table();

}  // namespace dpl
