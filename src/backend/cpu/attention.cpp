// Scaled dot-product attention on the CPU, the reference the GPU kernels are tested against: one
// (batch, head) per iteration of an OpenMP loop; per query row, the scores of the keys it sees,
// their maximum, the exponentials and their sum in float32, out = sum_j e_j v_j / sum_j e_j, and
// the row's log-sum-exp for backward, which recomputes the probabilities from it.
//
// 16-bit operands are read through float32 copies and the outputs rounded once, as Widened
// (cpu.hpp) does; Widened is not used because it needs contiguous tensors and these kernels read
// strided views of q, k, v, out and gout in place when they are float32. Strided outputs are
// written through packed copies.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

// A (B, H, T, E) operand read through its strides (the last one is 1).
struct Rows {
  const float* p;
  std::int64_t sb, sh, st;
  const float* row(std::int64_t b, std::int64_t h, std::int64_t t) const { return p + b * sb + h * sh + t * st; }
};

// t as float32 rows: t itself, or a contiguous float32 copy of a 16-bit tensor (kept in *hold).
Rows rows_of(const Tensor& t, Tensor& hold) {
  hold = t.dtype() == kFloat32 ? t : t.contiguous().to(kFloat32);
  return {hold.data<float>(), hold.strides()[0], hold.strides()[1], hold.strides()[2]};
}

// A packed float32 tensor the kernel writes for `out`: out itself when it is packed float32, else a
// packed float32 copy (of its contents when `keep`, for accumulation) that finish() rounds and
// lays into out.
struct Output {
  Output(Tensor& out, bool keep) : original(out) {
    if (out.dtype() == kFloat32 && out.is_contiguous()) work = out;
    else work = keep ? out.contiguous().to(kFloat32) : Tensor::empty(out.shape(), kFloat32);
  }
  float* data() { return work.data<float>(); }
  void finish() {
    if (!work.shares_storage_with(original)) original.copy_(work);
  }
  Tensor& original;
  Tensor work;
};

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Runs f(b, h) for every (batch, head), threaded when there is enough work.
template <typename F>
void for_each_head(std::int64_t batch, std::int64_t heads, std::int64_t work_per_head, F&& f) {
  const std::int64_t n = batch * heads;
#pragma omp parallel for if (n > 1 && n * work_per_head > kParallelGrain) schedule(static)
  for (std::int64_t bh = 0; bh < n; ++bh) f(bh / heads, bh % heads);
}

void sdpa_forward_cpu(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      Tensor& lse) {
  const std::int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  Tensor hq, hk, hv;
  const Rows rq = rows_of(q, hq), rk = rows_of(k, hk), rv = rows_of(v, hv);
  Output o(out, false);
  float* po = o.data();
  float* pl = lse.data<float>();
  for_each_head(B, H, Tq * Tk * (D + Dv), [&](std::int64_t b, std::int64_t h) {
    std::vector<float> e(static_cast<std::size_t>(Tk));
    for (std::int64_t i = 0; i < Tq; ++i) {
      const float* qi = rq.row(b, h, i);
      const std::int64_t nk = p.causal ? std::min(Tk, i + 1) : Tk;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < nk; ++j) {
        e[j] = p.scale * dot(qi, rk.row(b, h, j), D);
        m = std::max(m, e[j]);
      }
      float sum = 0.f;
      for (std::int64_t j = 0; j < nk; ++j) {
        e[j] = std::exp(e[j] - m);
        sum += e[j];
      }
      float* oi = po + ((b * H + h) * Tq + i) * Dv;
      std::fill(oi, oi + Dv, 0.f);
      for (std::int64_t j = 0; j < nk; ++j) {
        const float* vj = rv.row(b, h, j);
        for (std::int64_t d = 0; d < Dv; ++d) oi[d] += e[j] * vj[d];
      }
      for (std::int64_t d = 0; d < Dv; ++d) oi[d] /= sum;
      pl[(b * H + h) * Tq + i] = m + std::log(sum);
    }
  });
  o.finish();
}

// P_ij = exp(scale q_i.k_j - lse_i); dS_ij = P_ij (gout_i.v_j - gout_i.out_i);
// gq_i = scale sum_j dS_ij k_j, gk_j = scale sum_i dS_ij q_i, gv_j = sum_i P_ij gout_i.
void sdpa_backward_cpu(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& gout, const Tensor& lse, float beta, Tensor& gq, Tensor& gk, Tensor& gv) {
  const std::int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  Tensor hq, hk, hv, ho, hg;
  const Rows rq = rows_of(q, hq), rk = rows_of(k, hk), rv = rows_of(v, hv), ro = rows_of(out, ho),
             rg = rows_of(gout, hg);
  const bool acc = beta != 0.f;
  Output oq(gq, acc), ok(gk, acc), ov(gv, acc);
  float* pq = oq.data();
  float* pk = ok.data();
  float* pv = ov.data();
  const float* pl = lse.data<float>();
  for_each_head(B, H, Tq * Tk * (2 * D + 2 * Dv), [&](std::int64_t b, std::int64_t h) {
    std::vector<float> dq(static_cast<std::size_t>(D)), dk(static_cast<std::size_t>(Tk * D), 0.f),
        dv(static_cast<std::size_t>(Tk * Dv), 0.f);
    const std::int64_t bh = b * H + h;
    for (std::int64_t i = 0; i < Tq; ++i) {
      const float* qi = rq.row(b, h, i);
      const float* gi = rg.row(b, h, i);
      const float delta = dot(gi, ro.row(b, h, i), Dv);
      const float li = pl[bh * Tq + i];
      const std::int64_t nk = p.causal ? std::min(Tk, i + 1) : Tk;
      std::fill(dq.begin(), dq.end(), 0.f);
      for (std::int64_t j = 0; j < nk; ++j) {
        const float* kj = rk.row(b, h, j);
        const float* vj = rv.row(b, h, j);
        const float pij = std::exp(p.scale * dot(qi, kj, D) - li);
        const float ds = pij * (dot(gi, vj, Dv) - delta);
        float* dkj = dk.data() + j * D;
        float* dvj = dv.data() + j * Dv;
        for (std::int64_t d = 0; d < D; ++d) {
          dq[d] += ds * kj[d];
          dkj[d] += ds * qi[d];
        }
        for (std::int64_t d = 0; d < Dv; ++d) dvj[d] += pij * gi[d];
      }
      float* gqi = pq + (bh * Tq + i) * D;
      for (std::int64_t d = 0; d < D; ++d) gqi[d] = (acc ? gqi[d] : 0.f) + p.scale * dq[d];
    }
    float* gkh = pk + bh * Tk * D;
    float* gvh = pv + bh * Tk * Dv;
    for (std::int64_t e = 0; e < Tk * D; ++e) gkh[e] = (acc ? gkh[e] : 0.f) + p.scale * dk[e];
    for (std::int64_t e = 0; e < Tk * Dv; ++e) gvh[e] = (acc ? gvh[e] : 0.f) + dv[e];
  });
  oq.finish();
  ok.finish();
  ov.finish();
}

bool sdpa_fused_cpu(const SdpaParams&, const Tensor&, const Tensor&, const Tensor&) { return false; }

}  // namespace

DPL_REGISTER_KERNEL(sdpa_forward, kCpu, sdpa_forward_cpu);
DPL_REGISTER_KERNEL(sdpa_backward, kCpu, sdpa_backward_cpu);
DPL_REGISTER_KERNEL(sdpa_fused, kCpu, sdpa_fused_cpu);

}  // namespace dpl::backend::cpu
