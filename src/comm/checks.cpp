#include "comm/checks.hpp"

#include <cstdint>

namespace dpl::comm::detail {

std::string what_call(const char* collective, const std::string& comm_name) {
  return ::dpl::detail::concat(collective, " (", comm_name, ")");
}

void check_host_buffer(const char* collective, const std::string& comm_name, const Tensor& t, const char* role,
                       Use use) {
  check_buffer(collective, comm_name, t, role, use, false);
}

void check_buffer(const char* collective, const std::string& comm_name, const Tensor& t, const char* role, Use use,
                  bool device) {
  DPL_CHECK(t.defined(), what_call(collective, comm_name), ": ", role, " is an undefined tensor");
  if (device) {
    DPL_CHECK(t.device().is_cuda(), what_call(collective, comm_name), ": expected ", role,
              " on a GPU like the other buffers of this call, got a tensor on ", t.device());
  } else {
    DPL_CHECK(t.device().is_cpu(), what_call(collective, comm_name), ": expected ", role,
              " on the host (cpu), got a tensor on ", t.device(),
              "; the MPI communicators work on host memory");
  }
  DPL_CHECK(t.is_contiguous(), what_call(collective, comm_name), ": expected a contiguous ", role,
            ", got shape ", shape_str(t.shape()), " with strides ", shape_str(t.strides()),
            "; call contiguous() first");
  const DType d = t.dtype();
  const bool reducible = d == kFloat32 || d == kInt32 || d == kInt64;
  if (use == Use::kReduce) {
    DPL_CHECK(reducible, what_call(collective, comm_name), ": expected ", role,
              " of dtype float32, int32 or int64, got ", d);
  } else {
    // The 16-bit types move as opaque 2-byte words: no MPI reduction exists for them, but copying
    // them is well defined.
    DPL_CHECK(reducible || d == kBFloat16 || d == kFloat16, what_call(collective, comm_name), ": expected ", role,
              " of dtype float32, int32, int64, bfloat16 or float16, got ", d);
  }
}

void check_op(const char* collective, const std::string& comm_name, const Tensor& t, ReduceOp op) {
  DPL_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean, what_call(collective, comm_name),
            ": unknown reduction (expected kSum or kMean)");
  DPL_CHECK(op != ReduceOp::kMean || t.dtype() == kFloat32, what_call(collective, comm_name),
            ": ReduceOp::kMean needs a float32 buffer, got ", t.dtype(),
            " (an integer mean would truncate; reduce with kSum and divide)");
}

void check_root(const char* collective, const std::string& comm_name, int root, int size) {
  DPL_CHECK(root >= 0 && root < size, what_call(collective, comm_name), ": expected a root in [0, ", size,
            "), got ", root);
}

void check_peer(const char* collective, const std::string& comm_name, int peer, int rank, int size, int tag,
                int tag_ub) {
  const char* who = std::string(collective) == "send" ? "destination" : "source";
  DPL_CHECK(peer >= 0 && peer < size, what_call(collective, comm_name), ": expected a ", who, " rank in [0, ",
            size, "), got ", peer);
  // A blocking exchange with oneself can only deadlock, so it is refused rather than attempted.
  DPL_CHECK(peer != rank, what_call(collective, comm_name), ": the ", who, " is this rank (", rank,
            "); a blocking ", collective, " to oneself would never complete");
  DPL_CHECK(tag >= 0 && tag <= tag_ub, what_call(collective, comm_name), ": expected a tag in [0, ", tag_ub,
            "], got ", tag);
}

bool check_allgather(const std::string& comm_name, const Tensor& send, const Tensor& recv, int rank, int size,
                     bool device) {
  check_buffer("allgather", comm_name, send, "send", Use::kMove, device);
  check_buffer("allgather", comm_name, recv, "recv", Use::kMove, device);
  DPL_CHECK(recv.dtype() == send.dtype(), what_call("allgather", comm_name), ": expected recv of send's dtype ",
            send.dtype(), ", got ", recv.dtype());
  const std::int64_t want = send.numel() * size;
  DPL_CHECK(recv.numel() == want, what_call("allgather", comm_name), ": expected recv of size() * send.numel() = ",
            size, " * ", send.numel(), " = ", want, " elements, got ", recv.numel(), " (shape ",
            shape_str(recv.shape()), ")");
  if (!overlaps(send, recv)) return false;
  const auto* own_block = static_cast<const char*>(recv.raw_data()) + static_cast<std::size_t>(rank) * send.nbytes();
  DPL_CHECK(send.raw_data() == own_block, what_call("allgather", comm_name),
            ": send overlaps recv but is not this rank's block of it (elements [", rank * send.numel(), ", ",
            (rank + 1) * send.numel(), ")); use separate buffers or pass that block as send");
  return true;
}

void check_reduce_scatter(const std::string& comm_name, const Tensor& send, const Tensor& recv, int size,
                          bool device) {
  check_buffer("reduce_scatter", comm_name, send, "send", Use::kReduce, device);
  check_buffer("reduce_scatter", comm_name, recv, "recv", Use::kReduce, device);
  DPL_CHECK(recv.dtype() == send.dtype(), what_call("reduce_scatter", comm_name),
            ": expected recv of send's dtype ", send.dtype(), ", got ", recv.dtype());
  DPL_CHECK(send.numel() % size == 0, what_call("reduce_scatter", comm_name), ": expected send.numel() divisible by ",
            size, " ranks, got ", send.numel(), " elements (shape ", shape_str(send.shape()), ")");
  const std::int64_t want = send.numel() / size;
  DPL_CHECK(recv.numel() == want, what_call("reduce_scatter", comm_name),
            ": expected recv of send.numel() / size() = ", send.numel(), " / ", size, " = ", want,
            " elements, got ", recv.numel(), " (shape ", shape_str(recv.shape()), ")");
  DPL_CHECK(!overlaps(send, recv), what_call("reduce_scatter", comm_name),
            ": send and recv overlap in memory; use separate buffers");
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto* a0 = static_cast<const char*>(a.raw_data());
  const auto* b0 = static_cast<const char*>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

void divide_in_place(Tensor& buf, int divisor) {
  float* p = buf.data<float>();
  const std::int64_t n = buf.numel();
  const float d = static_cast<float>(divisor);
#pragma omp parallel for simd schedule(static) if (n > (std::int64_t{1} << 18))
  for (std::int64_t i = 0; i < n; ++i) p[i] /= d;
}

}  // namespace dpl::comm::detail
