#include "dpl/core/settings.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "dpl/core/error.hpp"

namespace dpl {

namespace {

// The value of a set, non-empty variable, else null.
const char* value_of(const char* (*lookup)(const char*), const char* name) {
  const char* v = lookup(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// A whole decimal number in [lo, hi], or nullopt when the text is anything else.
std::optional<long> whole_number(const std::string& text, long lo, long hi) {
  if (text.empty() || text.find_first_not_of("0123456789+-") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno != 0 || v < lo || v > hi) return std::nullopt;
  return v;
}

[[noreturn]] void bad_value(const char* name, const char* value, const char* accepted) {
  DPL_FAIL("environment variable ", name, ": expected ", accepted, ", got '", value, "'");
}

std::optional<int> positive(const char* (*lookup)(const char*), const char* name) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return std::nullopt;
  const auto n = whole_number(v, 1, INT_MAX);
  if (!n) bad_value(name, v, "a whole number from 1 to 2147483647");
  return static_cast<int>(*n);
}

std::optional<bool> flag(const char* (*lookup)(const char*), const char* name) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return std::nullopt;
  const std::string s(v);
  if (s == "1") return true;
  if (s == "0") return false;
  bad_value(name, v, "0 or 1");
}

// A whole number in [lo, hi] without a sign; nullopt when unset.
std::optional<int> unsigned_in(const char* (*lookup)(const char*), const char* name, long lo, long hi,
                               const char* accepted) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return std::nullopt;
  const auto n = whole_number(v, lo, hi);
  if (!n || std::string(v).find_first_of("+-") != std::string::npos) bad_value(name, v, accepted);
  return static_cast<int>(*n);
}

// A comma-separated list of whole numbers, each at least `lo` and without a sign; empty when unset.
std::vector<int> number_list(const char* (*lookup)(const char*), const char* name, long lo, const char* accepted) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return {};
  const std::string s(v);
  std::vector<int> list;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto n = whole_number(item, lo, INT_MAX);
    if (!n || item.find_first_of("+-") != std::string::npos) bad_value(name, v, accepted);
    list.push_back(static_cast<int>(*n));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return list;
}

OutputSetting output(const char* (*lookup)(const char*), const char* name) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return OutputSetting::kAuto;
  const std::string s(v);
  if (s == "plain") return OutputSetting::kPlain;
  if (s == "terminal") return OutputSetting::kTerminal;
  bad_value(name, v, "plain or terminal");
}

WindowStoresSetting window_stores(const char* (*lookup)(const char*), const char* name) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return WindowStoresSetting::kMeasured;
  const std::string s(v);
  if (s == "measured") return WindowStoresSetting::kMeasured;
  if (s == "cached") return WindowStoresSetting::kCached;
  if (s == "streaming") return WindowStoresSetting::kStreaming;
  bad_value(name, v, "measured, cached or streaming");
}

AttentionSetting attention(const char* (*lookup)(const char*), const char* name) {
  const char* v = value_of(lookup, name);
  if (v == nullptr) return AttentionSetting::kAuto;
  const std::string s(v);
  if (s == "auto") return AttentionSetting::kAuto;
  if (s == "plain") return AttentionSetting::kPlain;
  bad_value(name, v, "auto or plain");
}

const char* system_lookup(const char* name) { return std::getenv(name); }

}  // namespace

Settings parse_settings(const char* (*lookup)(const char* name)) {
  Settings s;
  s.ranks_per_node = number_list(lookup, "DPL_RANKS_PER_NODE", 1,
                                 "a whole number of ranks per node from 1 (\"2\"), or a comma-separated list of "
                                 "node sizes from 1 in rank order (\"2,1\")");
  s.num_threads = positive(lookup, "DPL_NUM_THREADS");
  if (s.num_threads && *s.num_threads > kMaxNumThreads)
    bad_value("DPL_NUM_THREADS", value_of(lookup, "DPL_NUM_THREADS"),
              ("a whole number of host threads per process from 1 to " + std::to_string(kMaxNumThreads)).c_str());
  s.omp_num_threads_set = value_of(lookup, "OMP_NUM_THREADS") != nullptr;
  s.cpu_caching = !flag(lookup, "DPL_CPU_NO_CACHING").value_or(false);
  s.cuda_caching = !flag(lookup, "DPL_CUDA_NO_CACHING").value_or(false);
  s.cuda_tf32 = flag(lookup, "DPL_CUDA_TF32").value_or(false);
  s.cudnn_benchmark = flag(lookup, "DPL_CUDNN_BENCHMARK").value_or(true);
  s.cudnn_candidates = positive(lookup, "DPL_CUDNN_CANDIDATES").value_or(s.cudnn_candidates);
  s.cudnn_workspace_slack =
      unsigned_in(lookup, "DPL_CUDNN_WORKSPACE_SLACK", 0, 100,
                  "a whole number of percent from 0 (always the fastest plan) to 100")
          .value_or(s.cudnn_workspace_slack);
  s.cutlass = flag(lookup, "DPL_CUTLASS").value_or(true);
  s.cuda_devices = number_list(lookup, "DPL_CUDA_DEVICE", 0,
                               "a device number or a comma-separated list of them (\"0\" or \"0,2\")");
  s.mpi_cuda_aware = flag(lookup, "DPL_MPI_CUDA_AWARE");
  s.output = output(lookup, "DPL_OUTPUT");
  s.window_stores = window_stores(lookup, "DPL_WINDOW_STORES");
  s.attention = attention(lookup, "DPL_ATTENTION");
  s.staging_chunk_bytes = positive(lookup, "DPL_STAGING_CHUNK_BYTES").value_or(s.staging_chunk_bytes);
  if (const auto slots = positive(lookup, "DPL_STAGING_SLOTS")) {
    if (*slots < 2) bad_value("DPL_STAGING_SLOTS", value_of(lookup, "DPL_STAGING_SLOTS"), "a whole number from 2 to 2147483647");
    s.staging_slots = *slots;
  }
  if (const char* v = value_of(lookup, "DPL_COLLECTIVE_TIMEOUT")) {
    // Whole seconds up to a year: enough for any collective, and far from overflowing a clock.
    const auto seconds = whole_number(v, 0, 31536000);
    if (!seconds || std::string(v).find_first_of("+-") != std::string::npos)
      bad_value("DPL_COLLECTIVE_TIMEOUT", v, "a whole number of seconds from 0 (no watchdog) to 31536000");
    s.collective_timeout = static_cast<int>(*seconds);
  }
  return s;
}

Settings settings() { return parse_settings(&system_lookup); }

const std::vector<SettingInfo>& settings_table() {
  static const std::vector<SettingInfo> table = {
      {"DPL_RANKS_PER_NODE", "unset (real nodes)",
       "k: group ranks [0,k), [k,2k), ... into virtual nodes of k ranks, so one host can play several nodes "
       "(k must divide the number of ranks); a,b,...: uneven virtual nodes of a, b, ... ranks in rank order "
       "(\"2,1\": ranks 0-1 and rank 2; the sizes must add up to the number of ranks)"},
      {"DPL_NUM_THREADS", "unset (cores / processes on the host)", "Host threads per process, 1 to 1024"},
      {"DPL_CPU_NO_CACHING", "0", "1: large host blocks go back to the system when freed (for memory checkers)"},
      {"DPL_CUDA_NO_CACHING", "0", "1: every device allocation and free goes to the driver (for compute-sanitizer)"},
      {"DPL_CUDA_TF32", "0", "1: matrix products may use TF32 tensor cores from the start"},
      {"DPL_CUDNN_BENCHMARK", "1",
       "1: convolutions time cuDNN's candidate plans once per shape and keep the fastest (or, within "
       "DPL_CUDNN_WORKSPACE_SLACK of it, the one with the smallest workspace), and for channels-last 16-bit "
       "images of 1–4 channels also dpl's direct kernels against cuDNN; 0: the first deterministic plan of "
       "cuDNN's heuristics (repeatable results)"},
      {"DPL_CUDNN_CANDIDATES", "12", "How many of cuDNN's heuristic plans DPL_CUDNN_BENCHMARK=1 times per shape"},
      {"DPL_CUDNN_WORKSPACE_SLACK", "3",
       "Percent slower than the fastest timed plan that a plan with a smaller workspace may be and still be "
       "chosen (0: always the fastest; 0 to 100)"},
      {"DPL_CUTLASS", "1",
       "1: on a GPU of compute capability 9.0 where the build has CUTLASS, 1x1 stride-1 convolutions that "
       "compute their batch-norm statistics (conv2d_with_sums) run on dpl's CUTLASS product, and so does the "
       "data gradient of one that completes a residual batch norm's output gradient, masking it and "
       "computing that batch norm's backward reductions; 0: both on cuDNN, with the statistics and the "
       "reductions computed as cuDNN can or by the batch norm's own passes"},
      {"DPL_CUDA_DEVICE", "unset (local rank % GPUs)",
       "The GPU of every process (\"1\"), or a comma-separated list indexed by the local rank (\"0,2\")"},
      {"DPL_MPI_CUDA_AWARE", "unset (ask the MPI library)", "0/1: whether MPI may be handed device memory"},
      {"DPL_OUTPUT", "unset (terminal when the stream is one)",
       "plain or terminal: how reports draw (automatic: plain unless a person watches the launcher's output)"},
      {"DPL_STAGING_CHUNK_BYTES", "4194304",
       "Bytes per chunk when device buffers are staged through pinned host memory for MPI"},
      {"DPL_STAGING_SLOTS", "4", "Pinned chunks in flight at once when staging (at least 2)"},
      {"DPL_COLLECTIVE_TIMEOUT", "600",
       "Seconds a collective may wait for the other ranks; then the watchdog reports the collective, its "
       "sequence number and the ranks that did not arrive, and aborts the job (0: no watchdog)"},
      {"DPL_WINDOW_STORES", "measured",
       "How hierarchical and two_dimensional write the node's shared window on host buffers: measured (each "
       "node times both kinds of stores now and then and uses the faster), cached (ordinary stores) or "
       "streaming (non-temporal stores, which skip the caches)"},
      {"DPL_ATTENTION", "auto",
       "Kernels of scaled_dot_product_attention on a GPU: auto (cuDNN's fused flash-attention kernels for "
       "16-bit operands where the build has cuDNN's frontend and cuDNN accepts the problem, dpl's own kernels "
       "otherwise) or plain (always dpl's own kernels)"},
  };
  return table;
}

}  // namespace dpl
