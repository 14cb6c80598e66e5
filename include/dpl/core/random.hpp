#pragma once
// Seeded random numbers for initialisation and shuffling.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dpl {

/// A seeded pseudo-random generator. Equal seeds give equal sequences on every platform that
/// uses the same standard library, which is what makes initialisation reproducible per rank.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0);
  Generator(const Generator&);
  Generator& operator=(const Generator&);
  ~Generator();

  /// Restarts the sequence from seed.
  void seed(std::uint64_t seed);
  /// Next uniformly distributed 64-bit value.
  std::uint64_t next_u64();
  /// Uniform in [low, high).
  float uniform(float low, float high);
  /// Normal with the given mean and standard deviation.
  float normal(float mean, float stddev);
  /// Uniform integer in [0, n); requires n > 0.
  std::uint64_t below(std::uint64_t n);

  /// Number of words in state(): the engine's words as the standard library writes them (312 and
  /// the position in them, with libstdc++), then the pending normal value's flag and bits.
  static std::size_t state_words();
  /// The complete state, for checkpoints. Ensures: a generator given set_state(state()) produces
  /// the same values as this one from here on, in any process built with the same standard library.
  std::vector<std::uint64_t> state() const;
  /// Restores a state exported by state(). Requires state_words() words whose flag word is 0 or 1
  /// and which the engine accepts; throws dpl::Error naming the expected and received value
  /// otherwise, leaving this generator unchanged.
  void set_state(const std::vector<std::uint64_t>& words);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The process-wide generator used when no generator is passed explicitly.
Generator& default_generator();
/// Reseeds the process-wide generator.
void manual_seed(std::uint64_t seed);

}  // namespace dpl
