#include "comm/mpi/node_shared_allreduce.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>

#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/mpi/mpi_runtime.hpp"

namespace dpl::comm::detail {

// The node's barrier lives in the window. `generation` has a cache line of its own, so that the
// ranks arriving (writing `arrived`) do not keep invalidating the line the waiting ranks poll.
struct NodeSharedAllreduce::Control {
  alignas(64) std::atomic<std::uint32_t> arrived{0};
  std::atomic<std::uint32_t> sleepers{0};  // ranks that are, or are about to be, asleep in the kernel
  alignas(64) std::atomic<std::uint32_t> generation{0};
  // 1: the next chunk writes the window with streaming stores. Written by the node's first rank
  // before a chunk's last barrier, read by every rank after it (window_store_choice.hpp).
  alignas(64) std::atomic<std::uint32_t> streaming{0};
};

namespace {

// The control block takes a page of its own, so the chunks behind it start page-aligned.
constexpr MPI_Aint kControlBytes = 4096;
// Slice boundaries fall on cache lines, so two ranks never write the same line of the result.
constexpr std::int64_t kLineBytes = 64;
// The window holds (ranks of the largest node + 1) chunks. Kept well inside the last-level cache
// of a server (tens of MiB), so that what one rank writes into the window is still in cache when
// the others read it and only the ranks' own buffers travel to and from DRAM.
constexpr std::int64_t kWindowBudgetBytes = 12 << 20;
constexpr std::int64_t kMinChunkBytes = 64 << 10;
constexpr std::int64_t kMaxChunkBytes = 4 << 20;
// Smaller chunks (the tail of a buffer, a 4-byte flag) take their time in the barriers, whatever
// the stores: they do not count towards the choice of stores.
constexpr std::int64_t kMinMeasuredChunkBytes = 256 << 10;
// How long a waiting rank that has a CPU of its own polls the barrier before it sleeps; a rank of
// a machine with more processes than CPUs sleeps at once. Milliseconds, not microseconds: a
// sleeping rank wakes when the scheduler next gives it a CPU, and while backward computes on the
// cores (the allreduce overlapped with it) that took about a millisecond per barrier, which
// left most of an overlapped allreduce exposed (docs/performance.md, "Overlapped allreduce on
// the CPU": a 0.06 ms poll left 0.61-1.08 of it exposed, a 3.4 ms poll 0.17-0.19).
constexpr std::chrono::microseconds kPollBeforeSleep{3000};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "the node's barrier needs lock-free atomics: they are the only ones that work across processes");

std::int64_t g_chunk_bytes_for_tests = 0;
bool g_window_allowed = true;
std::optional<WindowStoresSetting> g_window_stores_for_tests;

// The same on every rank of the job (it depends on the largest node only), as the inter-node
// step needs: every node cuts the buffer into the same chunks.
std::int64_t chunk_bytes_for(int largest_node) {
  if (g_chunk_bytes_for_tests > 0) return std::max(kLineBytes, g_chunk_bytes_for_tests / kLineBytes * kLineBytes);
  const std::int64_t bytes = std::clamp(kWindowBudgetBytes / (largest_node + 1), kMinChunkBytes, kMaxChunkBytes);
  return bytes / kLineBytes * kLineBytes;
}

struct Range {
  std::int64_t lo = 0, hi = 0;
  std::int64_t size() const { return hi - lo; }
};

// Slice `i` of `parts` of a chunk of `count` elements, cut on cache lines (`line` elements): the
// first slices are full, the last ones may be short or empty (a chunk smaller than a line per
// rank leaves the later ranks nothing to add).
Range slice_of(std::int64_t count, int parts, int i, std::int64_t line) {
  const std::int64_t per_part = (count + parts - 1) / parts;
  const std::int64_t step = (per_part + line - 1) / line * line;
  return {std::min(count, step * i), std::min(count, step * (i + 1))};
}

// Sleeps while *word == expected, or until woken; returns at once when it differs already. Other
// processes wake it: the word is in shared memory, so the futex is not the private kind.
void sleep_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
#else
  if (word.load() == expected) sched_yield();
#endif
}

void wake_all(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

#if defined(__SSE2__)
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif

// memcpy, with streaming stores where `streaming`: whole 64-byte lines go straight to memory
// without first fetching the line into this core's cache, and so without taking it from a
// partner's cache first (window_store_choice.hpp says when that pays). The bytes before the first
// 16-byte boundary of dst and after the last one are ordinary stores.
void store_copy(char* dst, const char* src, std::size_t n, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
    if (head > n) head = n;
    std::memcpy(dst, src, head);
    std::size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    for (; i + 16 <= n; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    std::memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, n);
}

// Streaming stores are not ordered with later stores: the barrier's release must not overtake
// them, or a partner could read the window before the data has arrived.
void fence_streaming_stores(bool streaming) {
#if defined(__SSE2__)
  if (streaming) _mm_sfence();
#endif
  (void)streaming;
}

// dst = src[0] + src[1] + ... + src[count-1], added in that order (rank order), so every node adds
// its ranks the same way. A is the type the addition happens in. Blocks keep the partial sums in
// L1 between sources.
// With `streaming`, each block is added up in a buffer on the stack (in L1) and then streamed
// into dst.
template <typename A>
void add_sources(char* dst_bytes, const char* const* src_bytes, int count, std::int64_t n, bool streaming) {
  constexpr std::int64_t kBlock = 2048;
  A block[kBlock];
  A* __restrict dst = reinterpret_cast<A*>(dst_bytes);
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    const A* __restrict s0 = reinterpret_cast<const A*>(src_bytes[0]) + b;
    A* __restrict d = streaming ? block : dst + b;
    const std::size_t bytes = static_cast<std::size_t>(m) * sizeof(A);
    if (count == 1) {
      store_copy(reinterpret_cast<char*>(dst + b), reinterpret_cast<const char*>(s0), bytes, streaming);
      continue;
    }
    const A* __restrict s1 = reinterpret_cast<const A*>(src_bytes[1]) + b;
    for (std::int64_t j = 0; j < m; ++j) d[j] = s0[j] + s1[j];
    for (int r = 2; r < count; ++r) {
      const A* __restrict s = reinterpret_cast<const A*>(src_bytes[r]) + b;
      for (std::int64_t j = 0; j < m; ++j) d[j] += s[j];
    }
    if (streaming) store_copy(reinterpret_cast<char*>(dst + b), reinterpret_cast<const char*>(block), bytes, true);
  }
}

// Integers add as unsigned of their width: the same bits as MPI_SUM's wrap-around, without the
// undefined behaviour of a signed overflow.
void add_sources(DType dtype, char* dst, const char* const* src, int count, std::int64_t n, bool streaming) {
  switch (dtype) {
    case DType::kFloat32: return add_sources<float>(dst, src, count, n, streaming);
    case DType::kInt32: return add_sources<std::uint32_t>(dst, src, count, n, streaming);
    case DType::kInt64: return add_sources<std::uint64_t>(dst, src, count, n, streaming);
    default: DPL_FAIL("shared-memory allreduce: expected a float32, int32 or int64 buffer, got ", dtype);
  }
}

// x / divisor, as divide_in_place does it, so that the means of two communicators agree to the
// bit whenever their sums do.
void divide(char* bytes, std::int64_t n, int divisor) {
  float* p = reinterpret_cast<float*>(bytes);
  const float d = static_cast<float>(divisor);
  for (std::int64_t i = 0; i < n; ++i) p[i] /= d;
}

}  // namespace

void set_shared_chunk_bytes(std::int64_t bytes) { g_chunk_bytes_for_tests = bytes; }

void set_shared_window_allowed(bool allowed) { g_window_allowed = allowed; }

void set_shared_window_stores(std::optional<WindowStoresSetting> stores) { g_window_stores_for_tests = stores; }

std::unique_ptr<NodeSharedAllreduce> NodeSharedAllreduce::create(MPI_Comm world, MPI_Comm intra, MPI_Comm inter,
                                                                 const Topology& t, const std::string& comm_name) {
  const std::string what = "create_communicator('" + comm_name + "')";
  // A virtual node may group ranks of different machines; shared memory then cannot hold it. (All
  // ranks of a node see the same answer: the node's ranks split into the same machines.)
  MPI_Comm shared = MPI_COMM_NULL;
  DPL_MPI_CHECK(MPI_Comm_split_type(intra, MPI_COMM_TYPE_SHARED, t.intra_rank, MPI_INFO_NULL, &shared),
                what + ": MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  const CommHandle shared_handle(shared);
  int shared_size = 0;
  MPI_Comm_size(shared, &shared_size);
  const bool shareable = shared_size == t.intra_size && g_window_allowed;

  std::unique_ptr<NodeSharedAllreduce> s(new NodeSharedAllreduce());
  s->what_ = what_call("allreduce", comm_name);
  s->intra_ = intra;
  s->inter_ = inter;
  s->local_rank_ = t.intra_rank;
  s->local_size_ = t.intra_size;
  s->inter_size_ = t.inter_size;
  s->job_size_ = t.size;
  const auto [smallest, largest] = std::minmax_element(t.node_sizes.begin(), t.node_sizes.end());
  s->inter_slices_ = *smallest;
  s->all_single_ = *largest == 1;
  s->oversubscribed_ = t.host_size > hardware_cpus();
  s->chunk_bytes_ = chunk_bytes_for(*largest);
  s->stores_ = kCanStream ? g_window_stores_for_tests.value_or(settings().window_stores) : WindowStoresSetting::kCached;

  // The window: the barrier's page, the result chunk, then one chunk per rank. Each page lands
  // near the rank that writes it first (its own chunk, its slice of the result).
  int mapped = 1;
  if (shareable && t.intra_size > 1) {
    s->window_bytes_ = static_cast<std::size_t>(kControlBytes + (t.intra_size + 1) * s->chunk_bytes_);
    mapped = s->map_window(intra) ? 1 : 0;
  }
  // The decision is the job's, not the node's: every node must cut its chunks alike for the
  // inter-node step to pair up. This also tells the leader that every rank has mapped the window.
  int usable = shareable && mapped ? 1 : 0;
  DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &usable, 1, MPI_INT, MPI_MIN, world), what + ": MPI_Allreduce");
  if (!s->shm_name_.empty()) shm_unlink(s->shm_name_.c_str());  // the mappings keep it alive
  if (!usable) return nullptr;
  return s;
}

// The leader creates a POSIX shared-memory object and tells the node its name; every rank maps it.
// Not MPI_Win_allocate_shared: freeing an MPI window is collective, and a communicator destroyed on
// one rank alone (a rank leaving with an error while the others wait in a collective) would then
// hang in the free instead of letting the job end. munmap is this rank's own business.
bool NodeSharedAllreduce::map_window(MPI_Comm intra) {
  static int created = 0;
  char name[64] = {0};
  char* base = nullptr;
  if (local_rank_ == 0) {
    for (int attempt = 0; attempt < 8 && name[0] == 0; ++attempt) {
      std::snprintf(name, sizeof name, "/dpl-allreduce-%ld-%d", static_cast<long>(getpid()), created++);
      const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) {
        name[0] = 0;  // a stale object of that name (or no shared memory at all): try another
        continue;
      }
      if (ftruncate(fd, static_cast<off_t>(window_bytes_)) == 0) {
        void* p = mmap(nullptr, window_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) base = static_cast<char*>(p);
      }
      close(fd);
      if (base == nullptr) {
        shm_unlink(name);
        name[0] = 0;
        break;
      }
    }
    // Built before anyone learns the name, so nobody sees the barrier half made.
    if (base != nullptr) new (base) Control();
  }
  DPL_MPI_CHECK(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, intra), what_ + ": MPI_Bcast");
  if (name[0] == 0) return false;  // the leader could not make one: the whole job falls back
  if (local_rank_ == 0) {
    shm_name_ = name;
  } else {
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return false;
    void* p = mmap(nullptr, window_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return false;
    base = static_cast<char*>(p);
  }
  window_ = base;
  control_ = reinterpret_cast<Control*>(base);
  result_ = base + kControlBytes;
  inputs_.resize(static_cast<std::size_t>(local_size_));
  for (int r = 0; r < local_size_; ++r)
    inputs_[static_cast<std::size_t>(r)] = result_ + (r + 1) * chunk_bytes_;
  return true;
}

NodeSharedAllreduce::~NodeSharedAllreduce() {
  if (window_ != nullptr) munmap(window_, window_bytes_);
}

// A counting barrier in shared memory: well under a microsecond when every rank has a CPU, where
// MPI_Barrier costs microseconds, and it is paid twice per chunk. The release/acquire pairs also
// order every rank's plain writes to the window before the other ranks' reads after the barrier.
// A rank that waits long sleeps in the kernel (a futex) instead of spinning or yielding: on a
// machine with more ranks than CPUs the rank it waits for needs the CPU, and a spinning or
// yielding waiter would take turns with it.
void NodeSharedAllreduce::node_barrier() {
  Control& c = *control_;
  const std::uint32_t generation = c.generation.load(std::memory_order_acquire);
  if (c.arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<std::uint32_t>(local_size_ - 1)) {
    c.arrived.store(0, std::memory_order_relaxed);
    // Sequentially consistent with the sleepers' increment-then-check below: either a sleeper sees
    // the new generation and does not sleep, or this sees the sleeper and wakes it.
    c.generation.store(generation + 1, std::memory_order_seq_cst);
    if (c.sleepers.load(std::memory_order_seq_cst) > 0) wake_all(c.generation);
    return;
  }
  if (!oversubscribed_) {
    // The clock is read once per 256 polls: a poll is a few nanoseconds, a clock read tens.
    const auto until = std::chrono::steady_clock::now() + kPollBeforeSleep;
    for (unsigned i = 1;; ++i) {
      if (c.generation.load(std::memory_order_acquire) != generation) return;
      cpu_relax();
      if (i % 256 == 0 && std::chrono::steady_clock::now() >= until) break;
    }
  }
  while (c.generation.load(std::memory_order_acquire) == generation) {
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (c.generation.load(std::memory_order_seq_cst) == generation) sleep_while_equal(c.generation, generation);
    c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

SharedAllreducePhases NodeSharedAllreduce::run(void* data, std::int64_t n, DType dtype, bool mean,
                                               bool synchronized) {
  SharedAllreducePhases phases;
  if (n == 0) return phases;
  const MPI_Datatype type = mpi_datatype(dtype);
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(dtype));
  char* const bytes = static_cast<char*>(data);

  if (all_single_) {
    // One rank per node: the whole buffer crosses nodes in place, in as few calls as MPI allows.
    // The node's steps have nothing to do but are timed all the same, as before: every rank
    // reports every phase.
    double t0 = MPI_Wtime();
    phases.intra_reduce = MPI_Wtime() - t0;
    t0 = MPI_Wtime();
    if (inter_size_ > 1)
      for_each_chunk(n, [&](std::int64_t off, int count) {
        DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + off * esize, count, type, MPI_SUM, inter_),
                      what_ + ": MPI_Allreduce");
      });
    if (mean) divide(bytes, n, job_size_);
    phases.inter_allreduce = MPI_Wtime() - t0;
    t0 = MPI_Wtime();
    phases.intra_gather = MPI_Wtime() - t0;
    return phases;
  }

  const std::int64_t chunk = chunk_bytes_ / esize;
  const std::int64_t line = kLineBytes / esize;
  const int me = local_rank_;
  const int p = local_size_;
  // Across nodes, slice i of a chunk travels among the ranks of intra_rank i. With equal nodes
  // that is the slice this rank has just added up; with unequal ones the chunk is cut into as many
  // slices as the smallest node has ranks (every node has a rank for each), which differ from the
  // node's own slices, so the node waits until its whole sum is in the window first.
  const bool resliced = inter_size_ > 1 && inter_slices_ != p;
  std::vector<const char*> sources(static_cast<std::size_t>(p));

  for (std::int64_t off = 0; off < n; off += chunk) {
    const std::int64_t count = std::min(chunk, n - off);
    char* const mine = bytes + off * esize;
    const Range own = slice_of(count, p, me, line);
    double t0 = MPI_Wtime();
    const double chunk_start = t0;

    Range carried = own;  // the part of the result this rank finishes (crosses nodes, divides)
    if (p == 1) {
      // A node of one rank among larger ones: its buffer is its node's sum already.
      carried = slice_of(count, inter_slices_, 0, line);
      phases.intra_reduce += MPI_Wtime() - t0;
      t0 = MPI_Wtime();
      if (carried.size() > 0)
        DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, mine + carried.lo * esize, static_cast<int>(carried.size()), type,
                                    MPI_SUM, inter_),
                      what_ + ": MPI_Allreduce");
      if (mean) divide(mine, count, job_size_);
      phases.inter_allreduce += MPI_Wtime() - t0;
      t0 = MPI_Wtime();
      phases.intra_gather += MPI_Wtime() - t0;
      continue;
    }

    // 1. What the other ranks need of this rank's chunk goes into its part of the window; its own
    //    slice it adds straight from its buffer. Every rank of the node writes the window with the
    //    same kind of stores in a chunk, the kind the node's first rank last published.
    const bool streaming = stores_ == WindowStoresSetting::kMeasured
                               ? control_->streaming.load(std::memory_order_relaxed) != 0
                               : stores_ == WindowStoresSetting::kStreaming;
    char* const in = inputs_[static_cast<std::size_t>(me)];
    store_copy(in, mine, static_cast<std::size_t>(own.lo * esize), streaming);
    store_copy(in + own.hi * esize, mine + own.hi * esize, static_cast<std::size_t>((count - own.hi) * esize),
               streaming);
    fence_streaming_stores(streaming);
    node_barrier();
    for (int r = 0; r < p; ++r)
      sources[static_cast<std::size_t>(r)] = (r == me ? mine : inputs_[static_cast<std::size_t>(r)]) + own.lo * esize;
    add_sources(dtype, result_ + own.lo * esize, sources.data(), p, own.size(), streaming);
    fence_streaming_stores(streaming);
    if (synchronized) node_barrier();
    phases.intra_reduce += MPI_Wtime() - t0;

    // 2. This rank's share of the node's sum meets the same share of every other node.
    t0 = MPI_Wtime();
    if (inter_size_ > 1) {
      if (resliced) {
        node_barrier();
        carried = me < inter_slices_ ? slice_of(count, inter_slices_, me, line) : Range{};
      }
      if (carried.size() > 0)
        DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, result_ + carried.lo * esize, static_cast<int>(carried.size()),
                                    type, MPI_SUM, inter_),
                      what_ + ": MPI_Allreduce");
    }
    if (mean) divide(result_ + carried.lo * esize, carried.size(), job_size_);
    if (synchronized) node_barrier();
    const double inter_seconds = MPI_Wtime() - t0;
    phases.inter_allreduce += inter_seconds;

    // 3. Every rank copies the whole result out. The next chunk's first barrier keeps anyone from
    //    overwriting the window before all have. Before this chunk's last barrier the first rank
    //    publishes the stores of the next chunk.
    t0 = MPI_Wtime();
    if (me == 0 && stores_ == WindowStoresSetting::kMeasured)
      control_->streaming.store(store_choice_.decide() ? 1 : 0, std::memory_order_relaxed);
    node_barrier();
    std::memcpy(mine, result_, static_cast<std::size_t>(count * esize));
    const double end = MPI_Wtime();
    phases.intra_gather += end - t0;
    // The node's passes, without the inter-node step (the network's time, whatever the stores):
    // what the first rank's choice compares.
    if (me == 0 && stores_ == WindowStoresSetting::kMeasured && count * esize >= kMinMeasuredChunkBytes)
      store_choice_.record(streaming, (end - chunk_start - inter_seconds) / static_cast<double>(count * esize));
  }
  return phases;
}

std::vector<SubPhase> NodeSharedAllreduce::allreduce(Tensor& buf, ReduceOp op, bool synchronized,
                                                     const char* gather_phase) {
  const SharedAllreducePhases t = run(buf.raw_data(), buf.numel(), buf.dtype(), op == ReduceOp::kMean, synchronized);
  return {SubPhase{"intra_reduce", t.intra_reduce}, SubPhase{"inter_allreduce", t.inter_allreduce},
          SubPhase{gather_phase, t.intra_gather}};
}

}  // namespace dpl::comm::detail
