// Device buffers over a host communicator: each CUDA tensor is copied into pinned host memory,
// the host collective runs there, and the result is copied back. This is how every MPI
// communicator accepts GPU buffers when MPI itself cannot read device memory.
#include <memory>

#include "comm/factories.hpp"
#include "dpl/core/clock.hpp"
#include "dpl/core/cuda.hpp"

namespace dpl::comm::detail {

namespace {

// A pinned host block that grows to the largest request and is reused by every call, so the
// steady state allocates nothing.
class PinnedSlot {
 public:
  // A host view of the slot shaped like t (contiguous).
  Tensor view_like(const Tensor& t) {
    const std::size_t need = t.nbytes();
    if (!storage_ || storage_->nbytes() < need) {
      storage_.reset();
      void* p = cuda::pinned_allocate(need);
      storage_ = std::make_shared<Storage>(p, need, Device::cpu(), [](void* q) { cuda::pinned_free(q); });
    }
    return Tensor(storage_, 0, t.shape(), contiguous_strides(t.shape()), t.dtype());
  }

 private:
  std::shared_ptr<Storage> storage_;
};

class StagingCommunicator final : public Communicator {
 public:
  explicit StagingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {
    topology_ = inner_->topology();
  }

  std::string name() const override { return inner_->name(); }

  void set_synchronized(bool on) override {
    synchronized_ = on;
    inner_->set_synchronized(on);
  }

  void allreduce(Tensor& buf, ReduceOp op) override {
    if (!on_device(buf)) {
      inner_->allreduce(buf, op);
      last_phases_ = inner_->last_phases();
      return;
    }
    Tensor host = to_host(buf, send_slot_, "allreduce");
    inner_->allreduce(host, op);
    back_to_device(host, buf);
  }

  void broadcast(Tensor& buf, int root) override {
    if (!on_device(buf)) {
      inner_->broadcast(buf, root);
      last_phases_ = inner_->last_phases();
      return;
    }
    Tensor host = to_host(buf, send_slot_, "broadcast");
    inner_->broadcast(host, root);
    back_to_device(host, buf);
  }

  void allgather(const Tensor& send, Tensor& recv) override {
    if (!on_device(send) && !on_device(recv)) {
      inner_->allgather(send, recv);
      last_phases_ = inner_->last_phases();
      return;
    }
    DPL_CHECK(!send.shares_storage_with(recv) || !on_device(recv),
              "allgather (", name(), "): in-place allgather on device buffers is not supported; pass separate "
              "send and recv tensors");
    Tensor hs = on_device(send) ? to_host(send, send_slot_, "allgather") : send;
    Tensor hr = on_device(recv) ? recv_slot_.view_like(recv) : recv;
    inner_->allgather(hs, hr);
    if (on_device(recv)) back_to_device(hr, recv);
  }

  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override {
    if (!on_device(send) && !on_device(recv)) {
      inner_->reduce_scatter(send, recv, op);
      last_phases_ = inner_->last_phases();
      return;
    }
    Tensor hs = on_device(send) ? to_host(send, send_slot_, "reduce_scatter") : send;
    Tensor hr = on_device(recv) ? recv_slot_.view_like(recv) : recv;
    inner_->reduce_scatter(hs, hr, op);
    if (on_device(recv)) back_to_device(hr, recv);
  }

  void barrier() override { inner_->barrier(); }

  void send(const Tensor& buf, int dest, int tag) override {
    if (!on_device(buf)) return inner_->send(buf, dest, tag);
    inner_->send(to_host(buf, send_slot_, "send"), dest, tag);
  }

  void recv(Tensor& buf, int source, int tag) override {
    if (!on_device(buf)) return inner_->recv(buf, source, tag);
    DPL_CHECK(buf.is_contiguous(), "recv (", name(), "): expected a contiguous buffer, got strides ",
              shape_str(buf.strides()));
    Tensor host = recv_slot_.view_like(buf);
    inner_->recv(host, source, tag);
    buf.copy_(host);
  }

 private:
  static bool on_device(const Tensor& t) { return t.defined() && t.device().is_cuda(); }

  // Copies t into the slot (the copy to the host waits for the device) and starts the phase list.
  Tensor to_host(const Tensor& t, PinnedSlot& slot, const char* collective) {
    DPL_CHECK(t.is_contiguous(), collective, " (", name(), "): expected a contiguous buffer, got shape ",
              shape_str(t.shape()), " with strides ", shape_str(t.strides()));
    const double t0 = now_seconds();
    Tensor host = slot.view_like(t);
    host.copy_(t);
    last_phases_.assign(1, SubPhase{"d2h", now_seconds() - t0});
    return host;
  }

  // Copies the result back; the copy runs on the device's stream, after which the slot may be
  // reused (later copies into it are queued behind this one).
  void back_to_device(const Tensor& host, Tensor& buf) {
    for (const auto& p : inner_->last_phases()) last_phases_.push_back(p);
    const double t0 = now_seconds();
    buf.copy_(host);
    if (synchronized_) cuda::synchronize(buf.device().index);
    last_phases_.push_back(SubPhase{"h2d", now_seconds() - t0});
  }

  std::unique_ptr<Communicator> inner_;
  PinnedSlot send_slot_, recv_slot_;
};

}  // namespace

std::unique_ptr<Communicator> make_staging(std::unique_ptr<Communicator> inner) {
  return std::make_unique<StagingCommunicator>(std::move(inner));
}

}  // namespace dpl::comm::detail
