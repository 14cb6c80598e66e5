#pragma once
// cuDNN descriptors for (N, C, H, W) tensors of any strides (NCHW and channels-last alike) and
// for per-channel float32 statistics. Internal; compiled with cuDNN only.

#include "backend/cuda/cudnn/cudnn_runtime.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// Owns one cuDNN descriptor of type T, made by Create and freed by Destroy; subclasses set it.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { DPL_CUDNN_CHECK(Create(&desc_)); }
  ~Descriptor() { Destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return desc_; }

 protected:
  T desc_ = nullptr;
};

/// A 4-D tensor described by its shape and strides, or a (C,) statistics tensor as (1, C, 1, 1).
class TensorDesc
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  explicit TensorDesc(const Tensor& t) {
    const cudnnDataType_t type = t.dtype() == DType::kBFloat16 ? CUDNN_DATA_BFLOAT16
                                 : t.dtype() == DType::kFloat16 ? CUDNN_DATA_HALF
                                                                 : CUDNN_DATA_FLOAT;
    const auto i = [](std::int64_t v) { return static_cast<int>(v); };
    if (t.dim() == 1) {
      DPL_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(desc_, type, 1, i(t.size(0)), 1, 1, i(t.size(0)), 1, 1, 1));
    } else {
      const Strides& s = t.strides();
      DPL_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(desc_, type, i(t.size(0)), i(t.size(1)), i(t.size(2)),
                                                   i(t.size(3)), i(s[0]), i(s[1]), i(s[2]), i(s[3])));
    }
  }
};

/// t's values with like's strides (t itself when it has them already): cuDNN's backward calls
/// want a gradient laid out as the tensor it belongs to. Queued on the compute stream.
Tensor with_strides_of(const Tensor& t, const Tensor& like);

/// An uninitialised tensor of like's shape, strides and dtype on its device.
Tensor empty_with_strides_of(const Tensor& like);

/// gx = beta*gx + result, for result in any strides (queued on the compute stream).
void accumulate_into(const Tensor& result, float beta, Tensor& gx);

}  // namespace dpl::backend::cuda_detail
