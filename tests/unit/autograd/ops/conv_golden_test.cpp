// conv2d against PyTorch: tests/golden/conv_golden.txt holds small fixed problems and PyTorch's
// float64 answers (written by tests/golden/make_conv_golden.py). Inputs are multiples of 1/64,
// exact in float32, so the only difference is float32 accumulation: |error| <= 1e-5 + 1e-5*|want|.
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/golden.hpp"

namespace dpl {
namespace {

using test::expect_golden;
using test::GoldenCase;

Conv2dPair pair_of(const GoldenCase& c, const char* key) { return {c.int_param(key, 0), c.int_param(key, 1)}; }

TEST(Conv2dGolden, MatchesPyTorchInBothLayouts) {
  const std::vector<GoldenCase> cases = test::load_golden("conv_golden.txt");
  ASSERT_EQ(cases.size(), 5u) << "tests/golden/conv_golden.txt is missing or incomplete";
  for (const GoldenCase& c : cases) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(c.name + (nhwc ? " channels-last" : " nchw"));
      auto layout = [&](const Tensor& t) { return nhwc ? t.to_channels_last() : t.clone(); };
      Variable x(layout(c.tensors.at("x")), true), w(layout(c.tensors.at("w")), true), b(c.tensors.at("b").clone(), true);
      const Variable y =
          conv2d(x, w, b, pair_of(c, "stride"), pair_of(c, "padding"), pair_of(c, "dilation"), c.int_param("groups"));
      expect_golden(y.data(), c.tensors.at("y"), "y");
      sum(mul(y, Variable(layout(c.tensors.at("gy"))))).backward();
      expect_golden(x.grad(), c.tensors.at("gx"), "gx");
      expect_golden(w.grad(), c.tensors.at("gw"), "gw");
      expect_golden(b.grad(), c.tensors.at("gb"), "gb");
    }
  }
}

}  // namespace
}  // namespace dpl
