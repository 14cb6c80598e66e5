#include "comm/mpi/node_barrier.hpp"

#include <sched.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <chrono>
#include <climits>

namespace dpl::comm::detail {

namespace {

// How long a waiting rank that has a CPU of its own polls the barrier before it sleeps; a rank of
// a machine with more processes than CPUs sleeps at once. Milliseconds, not microseconds: a
// sleeping rank wakes when the scheduler next gives it a CPU, and while backward computes on the
// cores (the allreduce overlapped with it) that took about a millisecond per barrier, which
// left most of an overlapped allreduce exposed (docs/performance.md, "Overlapped allreduce on
// the CPU": a 0.06 ms poll left 0.61-1.08 of it exposed, a 3.4 ms poll 0.17-0.19).
constexpr std::chrono::microseconds kPollBeforeSleep{3000};

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

}  // namespace

// Well under a microsecond when every rank has a CPU, where MPI_Barrier costs microseconds, and
// the allreduce pays it twice per chunk. The release/acquire pairs also order every rank's plain
// writes to the window before the other ranks' reads after the barrier. A rank that waits long
// sleeps in the kernel (a futex) instead of spinning or yielding: on a machine with more ranks
// than CPUs the rank it waits for needs the CPU, and a spinning or yielding waiter would take
// turns with it.
void NodeBarrier::wait(int ranks, bool oversubscribed) {
  const std::uint32_t current = generation.load(std::memory_order_acquire);
  if (arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<std::uint32_t>(ranks - 1)) {
    arrived.store(0, std::memory_order_relaxed);
    // Sequentially consistent with the sleepers' increment-then-check below: either a sleeper sees
    // the new generation and does not sleep, or this sees the sleeper and wakes it.
    generation.store(current + 1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) wake_all(generation);
    return;
  }
  if (!oversubscribed) {
    // The clock is read once per 256 polls: a poll is a few nanoseconds, a clock read tens.
    const auto until = std::chrono::steady_clock::now() + kPollBeforeSleep;
    for (unsigned i = 1;; ++i) {
      if (generation.load(std::memory_order_acquire) != current) return;
      cpu_relax();
      if (i % 256 == 0 && std::chrono::steady_clock::now() >= until) break;
    }
  }
  while (generation.load(std::memory_order_acquire) == current) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (generation.load(std::memory_order_seq_cst) == current) sleep_while_equal(generation, current);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace dpl::comm::detail
