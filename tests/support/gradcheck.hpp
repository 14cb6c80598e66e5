#pragma once
// Finite-difference gradient check shared by the unit tests.
//
// gradcheck(f, inputs) builds leaves from the inputs, reduces f's output to a scalar
//   L = sum(f(x) * w)
// with a fixed random weighting w (magnitudes in [0.5, 1.5], random signs), so that every output
// element contributes to L with a weight that is neither zero nor uniform: a gradient that is
// transposed, summed over the wrong axis or missing a broadcast reduction changes L's gradient.
// It then compares the analytic gradients from L.backward() with central differences
//   (L(x + h e_i) - L(x - h e_i)) / (x_i^+ - x_i^-)
// taken element by element. The denominator is the distance between the two float32 values that
// were actually evaluated (not 2h), and L is summed in double from the float32 outputs, so the
// only errors left are float32 rounding inside f and the O(h^2) truncation term.
//
// Tolerances (the defaults): h = 5e-3 * max(1, |x_i|), so 2h ~ 1e-2. With L of magnitude
// O(1..10) and float32 rounding of ~6e-8 relative, the rounding term is about
// 10 * 6e-8 / 1e-2 = 6e-5; the truncation term h^2/6 * |f'''| is of the same order for the
// smooth ops here. An element passes when
//   |analytic - numeric| <= 5e-4 + 5e-3 * |numeric|,
// which leaves a margin of about ten over those estimates (the checks of tests/unit/autograd/ops/
// land below 5% of this bound), while a gradient that is off by a factor, a sign or a transpose misses it by
// orders of magnitude.
//
// It also checks that a second backward pass adds to gradients already present (the mode every
// parameter's backward runs in, since parameters keep their arena views), and refuses all-zero
// inputs.
// Kinked functions (relu) need inputs further than h from the kink: see away_from_zero().

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"

namespace dpl::test {

struct GradcheckOptions {
  double relative_step = 5e-3;
  double atol = 5e-4;
  double rtol = 5e-3;
  /// Seeds the weighting w; a fixed seed makes a failure reproducible.
  std::uint64_t seed = 1234;
  /// Failures listed in the message before it is cut short.
  int max_reported = 8;
};

using VariableFn = std::function<Variable(const std::vector<Variable>&)>;

/// Float32 values with random signs and magnitudes in [lo, hi]: never zero, and never within lo
/// of a kink at 0.
inline Tensor away_from_zero(const Shape& shape, Generator& gen, float lo = 0.1f, float hi = 1.0f) {
  Tensor t = Tensor::uniform(shape, lo, hi, gen);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (gen.below(2) == 0) p[i] = -p[i];
  return t;
}

namespace detail {
// sum(out * w) in double, from the float32 output.
inline double weighted_sum(const Tensor& out, const std::vector<float>& w) {
  const std::vector<float> v = out.to_vector<float>();
  double acc = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) acc += static_cast<double>(v[i]) * static_cast<double>(w[i]);
  return acc;
}
}  // namespace detail

/// Checks every input's gradient of f at `inputs` (float32, CPU) against central differences.
/// The inputs are copied; f must be deterministic and may be called many times.
inline ::testing::AssertionResult gradcheck(const VariableFn& f, const std::vector<Tensor>& inputs,
                                            const GradcheckOptions& opt = {}) {
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<float> v = inputs[k].to_vector<float>();
    bool all_zero = true;
    for (float e : v) all_zero = all_zero && e == 0.f;
    // An all-zero point hides sign errors in mul and relu; the checks need random values.
    if (all_zero && !v.empty())
      return ::testing::AssertionFailure() << "gradcheck: input " << k << " is all zeros; use random values";
  }

  // --- analytic ---
  std::vector<Variable> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  const Variable out = f(leaves);
  if (!out.defined()) return ::testing::AssertionFailure() << "gradcheck: f returned an undefined variable";

  Generator gen(opt.seed);
  Tensor w = Tensor::uniform(out.shape(), 0.5f, 1.5f, gen);
  {
    float* p = w.data<float>();
    for (std::int64_t i = 0; i < w.numel(); ++i)
      if (gen.below(2) == 0) p[i] = -p[i];
  }
  const std::vector<float> wv = w.to_vector<float>();
  Variable loss = sum(mul(out, Variable(w)));
  loss.backward();

  std::vector<std::vector<float>> analytic;
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    const Tensor& g = leaves[k].grad();
    if (!g.defined())
      return ::testing::AssertionFailure() << "gradcheck: input " << k << " received no gradient";
    if (g.shape() != inputs[k].shape())
      return ::testing::AssertionFailure() << "gradcheck: input " << k << " has shape " << shape_str(inputs[k].shape())
                                           << " but its gradient has shape " << shape_str(g.shape());
    analytic.push_back(g.to_vector<float>());
  }

  // --- accumulation ---
  // Parameters keep their gradient buffers (views of the gradient arena) between backward passes,
  // so every backward kernel also runs in its accumulate mode. Run f again with each leaf's
  // gradient preset to known values: the result must be those values plus the fresh gradient.
  {
    std::vector<Variable> again;
    std::vector<Tensor> preset;
    for (const Tensor& t : inputs) {
      again.emplace_back(t.clone(), true);
      preset.push_back(Tensor::uniform(t.shape(), -1.f, 1.f, gen));
      again.back().set_grad(preset.back().clone());
    }
    sum(mul(f(again), Variable(w))).backward();
    for (std::size_t k = 0; k < again.size(); ++k) {
      const std::vector<float> got = again[k].grad().to_vector<float>();
      const std::vector<float> base = preset[k].to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double want = static_cast<double>(base[i]) + analytic[k][i];
        // Both passes run the same float32 kernels; only the final addition may round differently.
        const double scale = 1.0 + std::fabs(static_cast<double>(base[i])) + std::fabs(analytic[k][i]);
        if (!(std::fabs(got[i] - want) <= 1e-5 * scale))
          return ::testing::AssertionFailure()
                 << "gradcheck: accumulating into an existing gradient of input " << k << " gave " << got[i]
                 << " at element " << i << ", expected " << base[i] << " + " << analytic[k][i];
      }
    }
  }

  // --- numeric ---
  NoGradGuard no_grad;
  std::vector<Variable> probe;
  for (const Tensor& t : inputs) probe.emplace_back(t.clone(), false);
  std::ostringstream failures;
  int failed = 0;
  std::int64_t checked = 0;
  double worst = 0.0;
  for (std::size_t k = 0; k < probe.size(); ++k) {
    float* x = probe[k].data().data<float>();
    for (std::int64_t i = 0; i < probe[k].numel(); ++i) {
      const float x0 = x[i];
      const double h = opt.relative_step * std::max(1.0, std::fabs(static_cast<double>(x0)));
      const float xp = static_cast<float>(x0 + h);
      const float xm = static_cast<float>(x0 - h);
      x[i] = xp;
      const double lp = detail::weighted_sum(f(probe).data(), wv);
      x[i] = xm;
      const double lm = detail::weighted_sum(f(probe).data(), wv);
      x[i] = x0;
      const double numeric = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
      const double a = analytic[k][static_cast<std::size_t>(i)];
      const double err = std::fabs(a - numeric);
      const double allowed = opt.atol + opt.rtol * std::fabs(numeric);
      worst = std::max(worst, err / allowed);
      ++checked;
      if (!(err <= allowed)) {  // also catches NaN
        if (failed < opt.max_reported)
          failures << "\n  input " << k << " element " << i << ": analytic " << a << ", numeric " << numeric
                   << ", |diff| " << err << " > " << allowed;
        ++failed;
      }
    }
  }
  if (failed > 0)
    return ::testing::AssertionFailure() << "gradcheck: " << failed << " of " << checked
                                         << " gradient elements disagree:" << failures.str();
  return ::testing::AssertionSuccess() << "gradcheck: " << checked << " elements agree (worst error at "
                                       << worst << " of the tolerance)";
}

}  // namespace dpl::test
