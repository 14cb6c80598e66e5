#pragma once
// The seam between dpl's own attention kernels (attention.cu) and cuDNN's fused flash-attention
// kernels (backend/cuda/cudnn/attention.cpp, built only with cuDNN's frontend): the fused path
// installs itself here before main, and the registered sdpa kernels ask it first. A build without
// the frontend leaves it empty and runs the plain kernels. Internal header; no cuDNN or frontend
// header.

#include "backend/kernels.hpp"

namespace dpl::backend::cuda_detail {

/// cuDNN's fused attention. forward and backward either queue the whole call on the device's
/// compute stream and return true, or queue nothing and return false when cuDNN does not serve
/// the problem (decided once per problem and remembered); the arguments are those of
/// sdpa_forward and sdpa_backward. supports says whether both graphs of a problem are accepted.
struct FusedAttention {
  bool (*forward)(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                  Tensor& lse) = nullptr;
  bool (*backward)(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& gout, const Tensor& lse, float beta, Tensor& gq, Tensor& gk, Tensor& gv) = nullptr;
  bool (*supports)(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v) = nullptr;
};

/// The process's fused attention: empty unless a build with cuDNN's frontend installed it.
FusedAttention& fused_attention();

}  // namespace dpl::backend::cuda_detail
