// The communicator of builds without MPI: the job is this one process. Every collective keeps
// its argument checks, so a program that is wrong on one process is told so here too, before it
// meets a cluster.

#include "dpl/config.hpp"

#if !DPL_WITH_MPI

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/factories.hpp"

namespace dpl::comm::detail {

int job_rank() noexcept { return 0; }

void abort_job(int exit_code) noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

namespace {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(std::string name) : name_(std::move(name)) {
    install_terminate_handler();
    configure_threads_once(1);
  }

  std::string name() const override { return name_; }

  void allreduce(Tensor& buf, ReduceOp op) override {
    check_host_buffer("allreduce", name_, buf, "buf", Use::kReduce);
    check_op("allreduce", name_, buf, op);
    last_phases_.clear();
  }

  void broadcast(Tensor& buf, int root) override {
    check_host_buffer("broadcast", name_, buf, "buf", Use::kMove);
    check_root("broadcast", name_, root, 1);
  }

  void allgather(const Tensor& send, Tensor& recv) override {
    if (!check_allgather(name_, send, recv, 0, 1) && send.nbytes() > 0)
      std::memcpy(recv.raw_data(), send.raw_data(), send.nbytes());
  }

  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override {
    check_reduce_scatter(name_, send, recv, 1);
    check_op("reduce_scatter", name_, send, op);
    if (send.nbytes() > 0) std::memcpy(recv.raw_data(), send.raw_data(), send.nbytes());
  }

  void barrier() override {}

  void send(const Tensor& buf, int dest, int tag) override {
    check_host_buffer("send", name_, buf, "buf", Use::kMove);
    check_peer("send", name_, dest, 0, 1, tag, INT_MAX);
  }

  void recv(Tensor& buf, int source, int tag) override {
    check_host_buffer("recv", name_, buf, "buf", Use::kMove);
    check_peer("recv", name_, source, 0, 1, tag, INT_MAX);
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_single(const std::string& name) {
  return std::make_unique<SingleCommunicator>(name);
}

}  // namespace dpl::comm::detail

#endif  // !DPL_WITH_MPI
