#pragma once
// The generic parts of running an operation graph through cuDNN's graph (backend) API: owned
// backend descriptors, tensor descriptors by extents and strides, the engine configurations
// cuDNN's heuristics offer, the numerical notes that rule an engine out, execution plans and
// their execution. What one kind of graph is made of (convolution.cpp) stays with that kind.
// Internal: includes cudnn.h; compiled only in builds with cuDNN (DPL_WITH_CUDNN).

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/cuda/cudnn/cudnn_runtime.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/shape.hpp"

namespace dpl::backend::cuda_detail {

/// The cuDNN data type of a float dtype (float32 for anything that is not a 16-bit float).
cudnnDataType_t cudnn_type(DType t);

/// One owned cuDNN backend descriptor; attributes are set, then the descriptor is finalized.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    DPL_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }

  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
                  std::int64_t count = 1) {
    DPL_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
    return *this;
  }
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &o);
  }
  void finalize() { DPL_CUDNN_CHECK(cudnnBackendFinalize(d_)); }
  // Finalizing a plan fails for engines that do not support the problem; that is an answer, not
  // an error.
  bool try_finalize() { return cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// The largest power of two, up to 16, that divides the address: a plan is only valid for
/// pointers aligned at least as well as the ones it was built for, so the alignment is part of
/// the problem a plan is cached for.
std::int64_t alignment_of(const void* p);

/// A finalized tensor descriptor: `uid` ties it to a pointer of each call, `shape` and `strides`
/// (elements) describe the layout, `alignment` is alignment_of the pointers it will be run on.
Descriptor tensor_descriptor(std::int64_t uid, const Shape& shape, const Strides& strides, std::int64_t alignment,
                             DType dtype);

/// The engine configurations cuDNN's heuristics of `mode` offer for a finalized operation graph,
/// best first (none when the heuristics cannot be asked).
std::vector<Descriptor> engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode);

/// Whether an engine's numerical notes fit the problem: float32 data without `tf32` must not run
/// on tensor cores (nor down-convert its inputs), and without `benchmark` (the deterministic mode)
/// an engine must be deterministic.
bool acceptable(const Descriptor& config, DType dtype, bool tf32, bool benchmark);

/// A finalized execution plan for one engine configuration (its workspace bytes in *workspace),
/// or null when the engine cannot run it.
std::unique_ptr<Descriptor> finalize_plan(const Descriptor& config, cudnnHandle_t handle, std::int64_t* workspace);

/// A finalized plan and the descriptors it was built from (kept alive beside it).
struct Plan {
  std::vector<Descriptor> parts;
  std::unique_ptr<Descriptor> plan;
  std::int64_t workspace = 0;
};

/// Queues `plan` on the handle's stream with pointers[i] bound to the tensor of uids[i] (count of
/// each) and `workspace` (at least the plan's bytes); false when cuDNN refuses to execute it.
bool execute(cudnnHandle_t handle, const Descriptor& plan, const std::int64_t* uids, void** pointers, int count,
             void* workspace);

}  // namespace dpl::backend::cuda_detail
