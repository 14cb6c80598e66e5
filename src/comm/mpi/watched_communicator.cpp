// The communicator create_communicator hands out in MPI builds: the named algorithm, with every
// call marked for the collective watchdog (comm/watchdog.hpp). Marking costs a clock read and a few
// atomic stores per call; nothing is communicated.

#include <memory>
#include <string>
#include <utility>

#include "comm/factories.hpp"
#include "comm/watchdog.hpp"

namespace dpl::comm::detail {

namespace {

class WatchedCommunicator final : public Communicator {
 public:
  explicit WatchedCommunicator(std::unique_ptr<Communicator> inner)
      : inner_(std::move(inner)), name_(interned_name(inner_->name())) {
    topology_ = inner_->topology();
    synchronized_ = inner_->synchronized();
  }

  std::string name() const override { return inner_->name(); }

  void allreduce(Tensor& buf, ReduceOp op) override {
    WatchScope scope("allreduce", name_);
    inner_->allreduce(buf, op);
    last_phases_ = inner_->last_phases();
  }
  void broadcast(Tensor& buf, int root) override {
    WatchScope scope("broadcast", name_);
    inner_->broadcast(buf, root);
  }
  void allgather(const Tensor& send, Tensor& recv) override {
    WatchScope scope("allgather", name_);
    inner_->allgather(send, recv);
  }
  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override {
    WatchScope scope("reduce_scatter", name_);
    inner_->reduce_scatter(send, recv, op);
  }
  void barrier() override {
    WatchScope scope("barrier", name_);
    inner_->barrier();
  }
  void send(const Tensor& buf, int dest, int tag) override {
    WatchScope scope("send", name_, dest);
    inner_->send(buf, dest, tag);
  }
  void recv(Tensor& buf, int source, int tag) override {
    WatchScope scope("recv", name_, source);
    inner_->recv(buf, source, tag);
  }
  void set_synchronized(bool on) override {
    synchronized_ = on;
    inner_->set_synchronized(on);
  }

 protected:
  void allreduce_narrowed(Tensor& buf, ReduceOp op, DType wire_dtype) override {
    WatchScope scope("allreduce", name_);
    inner_->allreduce(buf, op, wire_dtype);
    last_phases_ = inner_->last_phases();
  }

 private:
  std::unique_ptr<Communicator> inner_;
  const char* name_;
};

}  // namespace

std::unique_ptr<Communicator> make_watched(std::unique_ptr<Communicator> inner) {
  return std::make_unique<WatchedCommunicator>(std::move(inner));
}

}  // namespace dpl::comm::detail
