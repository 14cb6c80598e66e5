#pragma once
// Attention: scaled dot-product attention over the heads of a batch, the core of a transformer
// block. The probabilities are recomputed in backward from per-row statistics instead of being
// stored, so memory grows with the sequence length, not with its square.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <optional>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Scaled dot-product attention (PyTorch's F.scaled_dot_product_attention without attn_mask and
/// dropout): out[b, h, i] = sum_j softmax_j(scale * q[b, h, i] . k[b, h, j]) v[b, h, j], the
/// softmax over the keys query i sees: every key, or with is_causal the keys j <= i (PyTorch's
/// top-left alignment, also when Tq != Tk: query i of a longer query sequence sees keys 0..i).
/// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv): one float dtype and device, Tk, D and Dv
/// >= 1. Any strides whose last one is 1 are read in place (the heads of a (B, T, 3, H, D)
/// projection split and permuted to (B, H, T, D) need no copy); other inputs are read through a
/// contiguous copy. scale: 1 / sqrt(D) when not given, else any finite value. The softmax, its
/// statistics and every sum are float32 whatever the dtype. On a GPU, bfloat16 and
/// float16 with head dimensions cuDNN supports run on cuDNN's fused flash-attention kernels in
/// builds with cuDNN's frontend, everything else on dpl's own kernels, which take head dimensions D
/// and Dv up to 1024 (docs/ops.md, "Attention").
/// Returns a contiguous (B, H, Tq, Dv) tensor of q's dtype; gradients flow to q, k and v.
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool is_causal = false,
                                      std::optional<double> scale = std::nullopt);

/// scaled_dot_product_attention over the output of one (B, T, 3 * H * D) projection, as a GPT
/// block's c_attn gives it: each row is [q | k | v], each of them H heads of D in order (PyTorch's
/// `q, k, v = qkv.split(C, 2)` then `view(B, T, H, D).transpose(1, 2)`). Returns (B, T, H * D):
/// the heads merged back in order, ready for the output projection. The values equal
/// scaled_dot_product_attention on those views with the heads merged after it; the gradient of
/// qkv is written straight into its (B, T, 3 * H * D) buffer, where the split-and-permute
/// composition would go through three separate gradients and a copy. heads >= 1 must divide the
/// last dimension by 3 * heads; scale and is_causal as above.
Variable scaled_dot_product_attention_packed(const Variable& qkv, std::int64_t heads, bool is_causal = false,
                                             std::optional<double> scale = std::nullopt);

}  // namespace dpl
