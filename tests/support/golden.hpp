#pragma once
// Golden files under tests/golden/: small fixed problems and PyTorch's float64 answers, written by
// the make_*_golden.py scripts beside them so that the C++ tests need no Python.
//
// Format: a line `case NAME KEY V... KEY V...` opens a case (each key followed by its numbers), then
// one line per tensor: `NAME D0,D1,... v0 v1 ...` (values in row-major order).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/source_tree.hpp"

namespace dpl::test {

struct GoldenCase {
  std::string name;
  std::map<std::string, std::vector<double>> params;
  std::map<std::string, Tensor> tensors;

  double param(const std::string& key, std::size_t i = 0) const { return params.at(key).at(i); }
  std::int64_t int_param(const std::string& key, std::size_t i = 0) const {
    return static_cast<std::int64_t>(param(key, i));
  }
  const Tensor& tensor(const std::string& key) const { return tensors.at(key); }
};

inline bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end != nullptr && *end == '\0';
}

inline Tensor parse_golden_tensor(std::istringstream& in) {
  std::string dims;
  in >> dims;
  Shape shape;
  std::istringstream ds(dims);
  for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
  std::vector<float> values;
  for (double v; in >> v;) values.push_back(static_cast<float>(v));
  return Tensor::from_vector(values, shape);
}

/// The cases of tests/golden/<file>, in file order (empty when the file is missing).
inline std::vector<GoldenCase> load_golden(const std::string& file) {
  std::ifstream in(source_path("tests/golden/" + file));
  std::vector<GoldenCase> cases;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string head;
    words >> head;
    if (head == "case") {
      GoldenCase c;
      words >> c.name;
      std::string key;
      for (std::string w; words >> w;) {
        if (is_number(w)) c.params[key].push_back(std::stod(w));
        else key = w;
      }
      cases.push_back(c);
    } else if (!head.empty() && !cases.empty()) {
      cases.back().tensors[head] = parse_golden_tensor(words);
    }
  }
  return cases;
}

/// The case called `name` among `cases` (read from `file`); a test failure naming both, and an
/// empty case, where there is none.
inline const GoldenCase& golden_case(const std::vector<GoldenCase>& cases, const std::string& name,
                                     const std::string& file) {
  for (const GoldenCase& c : cases)
    if (c.name == name) return c;
  static const GoldenCase missing;
  ADD_FAILURE() << "tests/golden/" << file << " has no case " << name;
  return missing;
}

/// A golden tensor of 0s and 1s as a uint8 mask (PyTorch's bool masks are written as 0/1).
inline Tensor golden_mask(const Tensor& t) {
  std::vector<std::uint8_t> bits;
  for (float v : t.to_vector<float>()) bits.push_back(v != 0.f ? 1 : 0);
  return Tensor::from_vector(bits, t.shape());
}

/// |got - want| <= atol + rtol * |want| elementwise, in logical order whatever got's format.
inline void expect_golden(const Tensor& got, const Tensor& want, const std::string& what, float rtol = 1e-5f,
                          float atol = 1e-5f) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.contiguous().to(kFloat32).to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - w[i]), atol + rtol * std::fabs(w[i])) << what << " at element " << i << ": got "
                                                                     << g[i] << ", PyTorch " << w[i];
}

}  // namespace dpl::test
