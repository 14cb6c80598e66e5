#include "backend/cuda/cudnn/norm_pool_descriptors.hpp"

#include "backend/kernels.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::backend::cuda_detail {

Tensor empty_with_strides_of(const Tensor& like) {
  return Tensor(Storage::allocate(like.nbytes(), like.device()), 0, like.shape(), like.strides(), like.dtype());
}

Tensor with_strides_of(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides()) return t;
  Tensor out(Storage::allocate(t.nbytes(), t.device()), 0, t.shape(), like.strides(), t.dtype());
  copy_strided(t, out);
  return out;
}

void accumulate_into(const Tensor& result, float beta, Tensor& gx) {
  if (beta == 0.f) {
    copy_strided(result, gx);
    return;
  }
  axpby(1.f, with_strides_of(result, gx), beta, gx);
}

}  // namespace dpl::backend::cuda_detail
