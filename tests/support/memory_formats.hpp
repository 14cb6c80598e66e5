#pragma once
// Checking ops in both memory formats: a graph run on contiguous and on channels-last inputs must
// give the same values and gradients, whatever format each result comes in.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "dpl/dpl.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::test {

/// True when t is laid out channels-last and not also contiguous.
inline bool is_nhwc(const Tensor& t) { return t.memory_format() == MemoryFormat::kChannelsLast; }

/// The logical values of t (independent of its memory format), as float32.
inline std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

/// Expects a and b to have one shape and, element by element, the same logical values (to 1e-5).
inline void expect_same_values(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<float> va = values(a), vb = values(b);
  for (std::size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], 1e-5f) << what << " at " << i;
}

/// A graph of two (2, 3, 4, 5) inputs.
using Graph = std::function<Variable(const Variable&, const Variable&)>;

/// The channels-last run of run_both: its output and its two inputs (with their gradients).
struct FormatRun {
  Variable out, x, y;
};

/// Runs graph on (x, y) given contiguous and given channels-last (y only when y_channels_last);
/// expects the outputs and both inputs' gradients of sum(output) to agree. Returns the
/// channels-last run, for checks of the formats it produced.
inline FormatRun run_both(const Graph& graph, bool y_channels_last = true) {
  Generator gen(7);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  const Tensor y = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  Variable xc(x.clone(), true), yc(y.clone(), true);
  Variable out_c = graph(xc, yc);
  sum(out_c).backward();
  Variable xl(x.to_channels_last(), true), yl(y_channels_last ? y.to_channels_last() : y.clone(), true);
  Variable out_l = graph(xl, yl);
  expect_same_values(out_l.data(), out_c.data(), "output");
  sum(out_l).backward();
  expect_same_values(xl.grad(), xc.grad(), "gradient of x");
  expect_same_values(yl.grad(), yc.grad(), "gradient of y");
  return {out_l, xl, yl};
}

/// t's values in a new channels-last tensor (NHWC strides written out, the stride of C is 1).
inline Tensor channels_last(const Tensor& t) {
  const std::int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  Tensor out(Storage::allocate(t.nbytes(), t.device()), 0, t.shape(), {h * w * c, 1, w * c, c}, t.dtype());
  out.copy_(t);
  return out;
}

/// True when t's C has stride 1 and W's stride C: channels-last by its strides alone.
inline bool is_channels_last(const Tensor& t) { return t.strides()[1] == 1 && t.strides()[3] == t.size(1); }

/// Expects a and b of one shape with |a - b| <= atol + rtol * |b| element by element (as float32).
inline void expect_close(const Tensor& a, const Tensor& b, float atol, float rtol) {
  ASSERT_EQ(a.shape(), b.shape());
  const auto va = a.to(kFloat32).to_vector<float>(), vb = b.to(kFloat32).to_vector<float>();
  for (std::size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], atol + rtol * std::fabs(vb[i])) << "element " << i;
}

}  // namespace dpl::test
