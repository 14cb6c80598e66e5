#pragma once
// The mean and variance of drawn values, for tests of random initialisation and sampling.

#include <vector>

namespace dpl::test {

inline double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

inline double variance_of(const std::vector<float>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}

}  // namespace dpl::test
