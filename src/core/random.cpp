#include "dpl/core/random.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

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

namespace {
// The engine's words through its text form, which every standard library can read back; the
// count of words depends on the library (libstdc++ adds its position in the state array).
std::vector<std::uint64_t> engine_words(const std::mt19937_64& engine) {
  std::stringstream text;
  text << engine;
  std::vector<std::uint64_t> words;
  std::uint64_t w = 0;
  while (text >> w) words.push_back(w);
  return words;
}
}  // namespace

std::size_t Generator::state_words() {
  static const std::size_t n = engine_words(std::mt19937_64()).size() + 2;
  return n;
}

std::vector<std::uint64_t> Generator::state() const {
  std::vector<std::uint64_t> words = engine_words(impl_->engine);
  std::uint32_t spare_bits = 0;
  std::memcpy(&spare_bits, &impl_->spare, sizeof spare_bits);
  words.push_back(impl_->has_spare ? 1 : 0);
  words.push_back(spare_bits);
  return words;
}

void Generator::set_state(const std::vector<std::uint64_t>& words) {
  const std::size_t n = state_words();
  DPL_CHECK(words.size() == n, "Generator::set_state: expected ", n, " words, got ", words.size());
  DPL_CHECK(words[n - 2] <= 1, "Generator::set_state: expected the pending-normal flag (word ", n - 2,
            ") to be 0 or 1, got ", words[n - 2]);
  DPL_CHECK(words[n - 1] <= 0xffffffffull, "Generator::set_state: expected the pending normal's bits (word ", n - 1,
            ") to fit in 32 bits, got ", words[n - 1]);
  // libstdc++'s extra word is its position in the 312 words, which it trusts when it next draws.
  constexpr std::size_t kMtWords = 312;
  DPL_CHECK(n - 2 == kMtWords || words[kMtWords] <= kMtWords, "Generator::set_state: expected the engine's position (word ",
            kMtWords, ") to be at most ", kMtWords, ", got ", words[kMtWords]);
  std::stringstream text;
  for (std::size_t i = 0; i + 2 < n; ++i) text << words[i] << ' ';
  std::mt19937_64 engine;
  text >> engine;
  DPL_CHECK(!text.fail(), "Generator::set_state: the engine refused the state words (not from Generator::state?)");
  impl_->engine = engine;
  impl_->has_spare = words[n - 2] == 1;
  const auto spare_bits = static_cast<std::uint32_t>(words[n - 1]);
  std::memcpy(&impl_->spare, &spare_bits, sizeof spare_bits);
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

}  // namespace dpl
