#include "dpl/core/random.hpp"

#include <cmath>
#include <random>

#include "dpl/core/error.hpp"

namespace dpl {

// mt19937_64 is fully specified by the standard, so sequences match across compilers. The
// distributions are written out here (not std::*_distribution, whose algorithms vary between
// standard libraries) for the same reason.
struct Generator::Impl {
  std::mt19937_64 engine;
  bool has_spare = false;
  float spare = 0.f;
};

Generator::Generator(std::uint64_t seed) : impl_(std::make_unique<Impl>()) { this->seed(seed); }
Generator::Generator(const Generator& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Generator& Generator::operator=(const Generator& other) {
  *impl_ = *other.impl_;
  return *this;
}
Generator::~Generator() = default;

void Generator::seed(std::uint64_t seed) {
  impl_->engine.seed(seed);
  impl_->has_spare = false;
}

std::uint64_t Generator::next_u64() { return impl_->engine(); }

float Generator::uniform(float low, float high) {
  // 24 random bits give every float in [0, 1) that has an exact 2^-24 step.
  const float u = static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
  const float r = low + (high - low) * u;
  // u < 1, but the product and sum round: where the floats near high are coarse compared with
  // high - low, r can come out equal to high, outside the half-open range.
  return r < high || !(low < high) ? r : std::nextafter(high, low);
}

float Generator::normal(float mean, float stddev) {
  if (impl_->has_spare) {
    impl_->has_spare = false;
    return mean + stddev * impl_->spare;
  }
  // Box-Muller on doubles; u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  impl_->spare = static_cast<float>(r * std::sin(theta));
  impl_->has_spare = true;
  return mean + stddev * static_cast<float>(r * std::cos(theta));
}

std::uint64_t Generator::below(std::uint64_t n) {
  DPL_CHECK(n > 0, "Generator::below: expected n > 0, got ", n);
  // Rejection sampling removes the modulo bias.
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

}  // namespace dpl
