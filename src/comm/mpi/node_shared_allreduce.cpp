#include "comm/mpi/node_shared_allreduce.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#include "comm/mpi/node_barrier.hpp"
#include "comm/mpi/node_shared_sums.hpp"
#include "comm/mpi/test_hooks.hpp"

namespace dpl::comm::detail {

// The window's first page: the node's barrier, and the kind of stores of the next chunk.
struct NodeSharedAllreduce::Control {
  NodeBarrier barrier;
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

// The same on every rank of the job (it depends on the largest node only), as the inter-node
// step needs: every node cuts the buffer into the same chunks.
std::int64_t chunk_bytes_for(int largest_node) {
  const std::int64_t for_tests = test_hooks::mpi_overrides().shared_chunk_bytes;
  if (for_tests > 0) return std::max(kLineBytes, for_tests / kLineBytes * kLineBytes);
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

}  // namespace

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
  const bool shareable = shared_size == t.intra_size && test_hooks::mpi_overrides().shared_window_allowed;

  std::unique_ptr<NodeSharedAllreduce> s(new NodeSharedAllreduce());
  s->what_ = what_call("allreduce", comm_name);
  s->comm_name_ = comm_name;
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
  s->stores_ = kCanStream ? test_hooks::mpi_overrides().shared_window_stores.value_or(settings().window_stores)
                         : WindowStoresSetting::kCached;

  // The window: the barrier's page, the result chunk, then one chunk per rank. Each page lands
  // near the rank that writes it first (its own chunk, its slice of the result).
  int mapped = 1;
  if (shareable && t.intra_size > 1) {
    s->window_bytes_ = static_cast<std::size_t>(kControlBytes + (t.intra_size + 1) * s->chunk_bytes_);
    mapped = s->map_window(intra) ? 1 : 0;
  }
  // The decision is the job's, not the node's: every node must cut its chunks alike for the
  // inter-node step to pair up. This also tells the leader that every rank has mapped the window.
  // The same allreduce tells whether the reduce-scatter and allgather can run through the windows:
  // their blocks map onto nodes only with equal nodes numbered regularly (hardware nodes may
  // interleave world ranks), and every rank's column of the others' blocks must fit its chunk.
  const std::int64_t blocks_handed_on = static_cast<std::int64_t>(t.inter_size) * (t.intra_size - 1);
  const bool regular = even_nodes(t) && t.rank == t.inter_rank * t.intra_size + t.intra_rank && t.intra_size > 1 &&
                       s->chunk_bytes_ / 8 / std::max<std::int64_t>(1, blocks_handed_on) >= 1;
  int flags[2] = {shareable && mapped ? 1 : 0, regular ? 1 : 0};
  DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MIN, world), what + ": MPI_Allreduce");
  if (!s->shm_name_.empty()) shm_unlink(s->shm_name_.c_str());  // the mappings keep it alive
  if (!flags[0]) return nullptr;
  s->scatters_ = flags[1] != 0;
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

// The node's barrier (node_barrier.cpp), paid twice per chunk.
void NodeSharedAllreduce::node_barrier() { control_->barrier.wait(local_size_, oversubscribed_); }

bool NodeSharedAllreduce::streaming_stores() const {
  return stores_ == WindowStoresSetting::kMeasured ? control_->streaming.load(std::memory_order_relaxed) != 0
                                                   : stores_ == WindowStoresSetting::kStreaming;
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
    const bool streaming = streaming_stores();
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
