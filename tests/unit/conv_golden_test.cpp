// conv2d against PyTorch: tests/golden/conv_golden.txt holds small fixed problems and PyTorch's
// float64 answers (written by tests/golden/make_conv_golden.py). Inputs are multiples of 1/64,
// exact in float32, so the only difference is float32 accumulation: |error| <= 1e-5 + 1e-5*|want|.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

struct GoldenCase {
  std::string name;
  Conv2dPair stride{}, padding{}, dilation{};
  std::int64_t groups = 1;
  std::map<std::string, Tensor> tensors;
};

Tensor parse_tensor(std::istringstream& in) {
  std::string dims;
  in >> dims;
  Shape shape;
  std::istringstream ds(dims);
  for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
  std::vector<float> values;
  for (double v; in >> v;) values.push_back(static_cast<float>(v));
  return Tensor::from_vector(values, shape);
}

std::vector<GoldenCase> load_cases() {
  std::ifstream file(source_path("tests/golden/conv_golden.txt"));
  std::vector<GoldenCase> cases;
  for (std::string line; std::getline(file, line);) {
    std::istringstream in(line);
    std::string head, word;
    in >> head;
    if (head == "case") {
      GoldenCase c;
      in >> c.name >> word >> c.stride[0] >> c.stride[1] >> word >> c.padding[0] >> c.padding[1] >> word >>
          c.dilation[0] >> c.dilation[1] >> word >> c.groups;
      cases.push_back(c);
    } else if (!head.empty() && !cases.empty()) {
      cases.back().tensors[head] = parse_tensor(in);
    }
  }
  return cases;
}

void expect_golden(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - w[i]), 1e-5f + 1e-5f * std::fabs(w[i])) << what << " at element " << i;
}

TEST(Conv2dGolden, MatchesPyTorchInBothLayouts) {
  const std::vector<GoldenCase> cases = load_cases();
  ASSERT_EQ(cases.size(), 5u) << "tests/golden/conv_golden.txt is missing or incomplete";
  for (const GoldenCase& c : cases) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(c.name + (nhwc ? " channels-last" : " nchw"));
      auto layout = [&](const Tensor& t) { return nhwc ? t.to_channels_last() : t.clone(); };
      Variable x(layout(c.tensors.at("x")), true), w(layout(c.tensors.at("w")), true), b(c.tensors.at("b").clone(), true);
      const Variable y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
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
