// Softmax cross-entropy and accuracy on the CPU.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

void softmax_xent_cpu(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& probs, Tensor& loss) {
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  const float* x = logits.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  float* p = probs.data<float>();
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (logits.numel() > kParallelGrain) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* pr = p + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < cols; ++j) mx = std::max(mx, xr[j]);
    float s = 0.f, row_sum = 0.f;
    for (std::int64_t j = 0; j < cols; ++j) {
      pr[j] = std::exp(xr[j] - mx);
      s += pr[j];
      row_sum += xr[j];
    }
    const float inv = 1.f / s;
    for (std::int64_t j = 0; j < cols; ++j) pr[j] *= inv;
    // log-sum-exp form keeps the loss finite when the true class's probability underflows.
    // With smoothing the target puts smoothing / C on every class: the loss subtracts that share
    // of the row's logits from the log-sum-exp.
    const float smoothed = smoothing == 0.f ? 0.f : smoothing / static_cast<float>(cols) * row_sum;
    total += static_cast<double>(std::log(s) + mx - (1.f - smoothing) * xr[t[r]] - smoothed);
  }
  loss.data<float>()[0] = rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.f;
}

void softmax_xent_backward_cpu(const Tensor& probs, const Tensor& labels, float smoothing, const Tensor& gloss,
                               float beta, Tensor& glogits) {
  const std::int64_t rows = probs.size(0), cols = probs.size(1);
  const float* p = probs.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  float* g = glogits.data<float>();
  const float scale = rows ? gloss.data<float>()[0] / static_cast<float>(rows) : 0.f;
  const float uniform = smoothing / static_cast<float>(cols);
#pragma omp parallel for if (probs.numel() > kParallelGrain) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float v = scale * (p[r * cols + j] - (j == t[r] ? 1.f - smoothing : 0.f) - uniform);
      g[r * cols + j] = (beta == 0.f ? 0.f : g[r * cols + j]) + v;
    }
  }
}

void accuracy_cpu(const Tensor& logits, const Tensor& labels, Tensor& out) {
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  const float* x = logits.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < cols; ++j)
      if (x[r * cols + j] > x[r * cols + best]) best = j;
    correct += best == t[r];
  }
  out.data<float>()[0] = rows ? static_cast<float>(correct) / static_cast<float>(rows) : 0.f;
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_xent, softmax_xent_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_xent_backward, softmax_xent_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(accuracy, accuracy_cpu);

}  // namespace dpl::backend::cpu
