#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {

// Counter-based random numbers: value i of stream s under a seed is a pure function of
// (seed, s, i), so results never depend on how work is split across threads.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream)
      : key_(mix(seed ^ mix(stream + 0x9e3779b97f4a7c15ull))) {}

  uint64_t bits(uint64_t counter) const { return mix(key_ + mix(counter)); }

  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t counter) const { return (bits(counter) >> 11) * 0x1.0p-53; }

  // Standard normal by Box-Muller over two consecutive counters.
  double normal(uint64_t counter) const {
    double u1 = uniform(2 * counter) + 0x1.0p-54;
    double u2 = uniform(2 * counter + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  uint64_t below(uint64_t counter, uint64_t n) const { return bits(counter) % n; }

 private:
  static uint64_t mix(uint64_t z) {  // splitmix64 finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t key_;
};

}  // namespace tessera
