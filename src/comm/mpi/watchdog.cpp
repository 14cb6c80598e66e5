#include "comm/watchdog.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/environment.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::comm::detail {

namespace {

// --- the current operation: written by the communicating thread, read by the watchdog --------------
//
// Only the thread that communicates writes these (collectives are called from one thread), so the
// sequence number needs no read-modify-write. start_ns is written last on entry and first on exit:
// a reader that sees the same non-zero start before and after reading the rest has a consistent
// picture.
std::atomic<std::uint64_t> g_seq{0};
std::atomic<const char*> g_op{nullptr};
std::atomic<const char*> g_comm{nullptr};
std::atomic<int> g_peer{-1};
std::atomic<std::int64_t> g_start{0};

constexpr int kQueryTag = 1;   // an expired rank asks: where are you? (the payload is its own record)
constexpr int kAnswerTag = 2;  // the answer: this rank's record

// One rank's state on the wire (MPI_BYTE; every rank runs the same build, so one layout).
struct Record {
  std::int64_t seq = 0;      // collectives entered so far
  std::int64_t waited_ms = -1;  // how long the current operation has waited; -1: not in one
  std::int32_t peer = -1;
  std::int32_t on_device = 0;   // 1: the operation is queued work unfinished on the GPU
  char op[32] = {0};
  char comm[32] = {0};
};

void copy_name(char (&to)[32], const char* from) {
  std::strncpy(to, from ? from : "", sizeof to - 1);
  to[sizeof to - 1] = '\0';
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// "allreduce (naive) #57" or "recv from rank 1 (naive), after collective #57".
std::string op_text(const std::string& op, const std::string& comm, int peer, std::int64_t seq) {
  std::ostringstream os;
  if (peer >= 0) {
    os << op << (op == "send" ? " to rank " : " from rank ") << peer << " (" << comm << "), after collective #" << seq;
  } else {
    os << op << " (" << comm << ") #" << seq;
  }
  return os.str();
}

class Watchdog {
 public:
  Watchdog() {
    MPI_Comm c = MPI_COMM_NULL;
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "create_communicator: MPI_Comm_dup (watchdog)");
    comm_ = c;
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    multiple_ = level >= MPI_THREAD_MULTIPLE;
    timeout_ = settings().collective_timeout;
    if (size_ < 2 || timeout_ <= 0) return;
    // A few polls per deadline, at most one a second: the answer to another rank's question waits
    // at most this long, and an expiry is noticed at most this late.
    const std::int64_t timeout_ms = std::int64_t{timeout_} * 1000;  // up to a year: beyond int
    tick_ms_ = static_cast<int>(std::clamp<std::int64_t>(timeout_ms / 4, 50, 1000));
    // Long enough for every live rank's thread to poll several times.
    grace_ms_ = static_cast<int>(std::clamp<std::int64_t>(timeout_ms / 2, 4 * tick_ms_ + 500, 10000));
    if (multiple_) post_query();
    thread_ = std::thread([this] { run(); });
    // MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works: the thread is
    // stopped there, whoever finalises.
    int key = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &Watchdog::on_finalize, &key, this);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, this);
  }

  int timeout() const { return timeout_; }
  bool can_communicate() const { return multiple_; }

  void add(DeviceWork* w) {
    std::lock_guard<std::mutex> lock(work_mu_);
    work_.push_back(w);
  }
  void remove(DeviceWork* w) noexcept {
    std::lock_guard<std::mutex> lock(work_mu_);
    work_.erase(std::remove(work_.begin(), work_.end(), w), work_.end());
  }

 private:
  static int on_finalize(MPI_Comm, int, void*, void* extra) {
    static_cast<Watchdog*>(extra)->stop();
    return MPI_SUCCESS;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (query_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&query_);
      MPI_Wait(&query_, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&comm_);
  }

  void post_query() {
    MPI_Irecv(&query_in_, sizeof(Record), MPI_BYTE, MPI_ANY_SOURCE, kQueryTag, comm_, &query_);
  }

  // Answers every question that has arrived with this rank's record. Requires work_mu_ held.
  void answer_queries() {
    if (!multiple_) return;
    for (;;) {
      int done = 0;
      MPI_Status st;
      if (MPI_Test(&query_, &done, &st) != MPI_SUCCESS || !done) return;
      const Record mine = my_record();
      MPI_Send(&mine, sizeof(Record), MPI_BYTE, st.MPI_SOURCE, kAnswerTag, comm_);
      post_query();
    }
  }

  // This rank now: its host operation or, when it is in none, its oldest unfinished device work.
  // Requires work_mu_ held.
  Record my_record() {
    Record r;
    const WatchedOp op = current_op();
    r.seq = static_cast<std::int64_t>(op.seq);
    r.peer = op.peer;
    copy_name(r.op, op.op);
    copy_name(r.comm, op.comm);
    const std::int64_t now = steady_ns();
    if (op.start_ns != 0) {
      r.waited_ms = (now - op.start_ns) / 1000000;
      return r;
    }
    for (DeviceWork* w : work_) {
      const WatchedOp d = w->unfinished();
      if (d.start_ns == 0) continue;
      r.seq = static_cast<std::int64_t>(d.seq);
      r.peer = d.peer;
      copy_name(r.op, d.op);
      copy_name(r.comm, d.comm);
      r.waited_ms = (now - d.start_ns) / 1000000;
      r.on_device = 1;
      break;
    }
    return r;
  }

  void run() {
    const std::int64_t limit_ns = static_cast<std::int64_t>(timeout_) * 1000000000;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(tick_ms_));
      if (stopping_) break;
      std::lock_guard<std::mutex> work_lock(work_mu_);
      answer_queries();
      const std::int64_t now = steady_ns();
      const WatchedOp op = current_op();
      if (op.start_ns != 0 && now - op.start_ns > limit_ns) expire_locked();
      for (DeviceWork* w : work_) {
        const WatchedOp d = w->unfinished();
        if (d.start_ns != 0 && now - d.start_ns > limit_ns) expire_locked();
      }
    }
  }

  // The deadline has passed: ask, report, abort. Never returns. Requires work_mu_ held.
  [[noreturn]] void expire_locked() {
    const Record mine = my_record();
    std::vector<Record> theirs(static_cast<std::size_t>(size_));
    std::vector<bool> answered(static_cast<std::size_t>(size_), false);
    answered[static_cast<std::size_t>(rank_)] = true;
    theirs[static_cast<std::size_t>(rank_)] = mine;
    if (multiple_) {
      std::vector<MPI_Request> recvs(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
      std::vector<MPI_Request> sends(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        MPI_Irecv(&theirs[static_cast<std::size_t>(r)], sizeof(Record), MPI_BYTE, r, kAnswerTag, comm_,
                  &recvs[static_cast<std::size_t>(r)]);
        MPI_Isend(&mine, sizeof(Record), MPI_BYTE, r, kQueryTag, comm_, &sends[static_cast<std::size_t>(r)]);
      }
      const std::int64_t until = steady_ns() + static_cast<std::int64_t>(grace_ms_) * 1000000;
      int pending = size_ - 1;
      while (pending > 0 && steady_ns() < until) {
        answer_queries();  // ranks that expire as well ask us in turn
        for (int r = 0; r < size_; ++r) {
          auto& req = recvs[static_cast<std::size_t>(r)];
          if (req == MPI_REQUEST_NULL) continue;
          int done = 0;
          if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
            answered[static_cast<std::size_t>(r)] = true;
            --pending;
          }
        }
        if (pending > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    report_error(rank_, message(mine, theirs, answered));
    for (DeviceWork* w : work_) w->abort();
    if (multiple_) {
      // Ranks that expired together are collecting the same answers: give them a moment to print
      // theirs before this rank's abort ends them.
      const std::int64_t until = steady_ns() + 500000000;
      while (steady_ns() < until) {
        answer_queries();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      abort_job(1);
    }
    // MPI may not be called from this thread: ending this process makes mpiexec end the job.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }

  std::string message(const Record& mine, const std::vector<Record>& all, const std::vector<bool>& answered) const {
    std::ostringstream os;
    os << "watchdog: " << op_text(mine.op, mine.comm, mine.peer, mine.seq)
       << (mine.on_device ? ", queued on the GPU," : "") << " has waited " << seconds_text(mine.waited_ms / 1000.0)
       << ", longer than DPL_COLLECTIVE_TIMEOUT=" << timeout_ << " s.";
    if (!multiple_) {
      os << " The other ranks cannot be asked where they are (MPI was initialised without MPI_THREAD_MULTIPLE); "
            "ending this rank, which ends the job.";
      return os.str();
    }
    std::vector<int> missing;
    std::vector<std::string> details;
    const std::string my_op(mine.op);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      // A send or recv waits for its peer only.
      if (mine.peer >= 0 && r != mine.peer) continue;
      const Record& t = all[static_cast<std::size_t>(r)];
      if (!answered[static_cast<std::size_t>(r)]) {
        missing.push_back(r);
        details.push_back("rank " + std::to_string(r) + " did not answer within " +
                          seconds_text(grace_ms_ / 1000.0) + " (stopped, finished, or hung outside MPI)");
        continue;
      }
      const bool in_op = t.waited_ms >= 0;
      const bool same = in_op && t.seq == mine.seq && my_op == t.op && t.peer < 0 && mine.peer < 0;
      if (same) continue;  // arrived, and waits as this rank does
      if (t.seq < mine.seq || (mine.peer >= 0 && !(in_op && t.peer == rank_))) missing.push_back(r);
      std::string d = "rank " + std::to_string(r) + " is ";
      if (in_op) {
        d += std::string("in ") + op_text(t.op, t.comm, t.peer, t.seq) + (t.on_device ? " (on the GPU)" : "") +
             " for " + seconds_text(t.waited_ms / 1000.0);
      } else {
        d += "in no collective; its last was " + (t.op[0] ? op_text(t.op, t.comm, t.peer, t.seq) : std::string("none"));
      }
      details.push_back(d);
    }
    if (missing.empty()) {
      os << " Every rank arrived, and the collective has not completed (a failed link, or a collective that needs "
            "longer than the deadline).";
    } else {
      os << " Rank(s) that did not arrive: ";
      for (std::size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
      os << '.';
    }
    constexpr std::size_t kShown = 8;
    for (std::size_t i = 0; i < details.size() && i < kShown; ++i) os << (i ? "; " : " ") << details[i];
    if (details.size() > kShown) os << " (and " << details.size() - kShown << " more ranks)";
    if (!details.empty()) os << '.';
    os << " Aborting every rank (DPL_COLLECTIVE_TIMEOUT sets the deadline in seconds; 0 turns the watchdog off).";
    return os.str();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool multiple_ = false;
  int timeout_ = 0;
  int tick_ms_ = 1000, grace_ms_ = 10000;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  MPI_Request query_ = MPI_REQUEST_NULL;
  Record query_in_;
  std::mutex work_mu_;
  std::vector<DeviceWork*> work_;
};

// Never destroyed: a joinable thread in a static would terminate the process at exit, before MPI
// is finalised (which stops the thread).
Watchdog* g_watchdog = nullptr;

}  // namespace

void start_watchdog() {
  if (g_watchdog != nullptr) return;
  // Ranks with different deadlines disagree on what a hang is: with 0 on one rank and 10 on
  // another, stopping the rank whose watchdog is on leaves the others waiting forever. Refused
  // here, in the first create_communicator, where every rank comes: every rank throws the same
  // error naming each rank's value.
  check_same_request({{"DPL_COLLECTIVE_TIMEOUT", std::to_string(settings().collective_timeout)}});
  g_watchdog = new Watchdog();
}

int watchdog_timeout() { return g_watchdog ? g_watchdog->timeout() : 0; }

bool watchdog_can_communicate() { return g_watchdog && g_watchdog->can_communicate(); }

const char* interned_name(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::deque<std::string>();  // never freed: scopes may outlive any owner
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& n : *names)
    if (n == name) return n.c_str();
  names->push_back(name);
  return names->back().c_str();
}

WatchScope::WatchScope(const char* op, const char* comm, int peer) noexcept {
  if (g_start.load(std::memory_order_relaxed) != 0) return;  // inside another watched call
  outermost_ = true;
  if (peer < 0) g_seq.store(g_seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  g_op.store(op, std::memory_order_relaxed);
  g_comm.store(comm, std::memory_order_relaxed);
  g_peer.store(peer, std::memory_order_relaxed);
  g_start.store(steady_ns(), std::memory_order_release);
}

WatchScope::~WatchScope() {
  if (outermost_) g_start.store(0, std::memory_order_release);
}

WatchedOp current_op() noexcept {
  WatchedOp op;
  for (int attempt = 0; attempt < 4; ++attempt) {
    op.start_ns = g_start.load(std::memory_order_acquire);
    op.seq = g_seq.load(std::memory_order_relaxed);
    op.op = g_op.load(std::memory_order_relaxed);
    op.comm = g_comm.load(std::memory_order_relaxed);
    op.peer = g_peer.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_start.load(std::memory_order_relaxed) == op.start_ns) break;
  }
  return op;
}

void add_device_work(DeviceWork* work) {
  if (g_watchdog) g_watchdog->add(work);
}

void remove_device_work(DeviceWork* work) noexcept {
  if (g_watchdog) g_watchdog->remove(work);
}

}  // namespace dpl::comm::detail
