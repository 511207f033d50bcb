// Seeded, portable random numbers. std::shuffle and the std distributions are
// implementation-defined, so datasets and epoch orders would differ between standard
// libraries; these do not.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
#include <vector>

namespace spoke::bench {

// SplitMix64: seeds the main generator and mixes (seed, stream) pairs.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Derives an independent seed for a sub-stream (an epoch, a sample) from a base seed.
inline uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t s = seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);
  SplitMix64(s);
  return SplitMix64(s);
}

// xoshiro256**: fast, good quality, satisfies UniformRandomBitGenerator.
class Rng {
 public:
  using result_type = uint64_t;
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = SplitMix64(seed);
  }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

  result_type operator()() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n), unbiased (Lemire's multiply-and-reject). n > 0.
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>((*this)()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>((*this)()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

  // Standard normal (Box-Muller).
  double Normal() {
    double u1 = Uniform();
    while (u1 <= 0.0) u1 = Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  // Fills bytes with random content (incompressible).
  void Fill(std::span<std::byte> out) {
    size_t i = 0;
    for (; i + 8 <= out.size(); i += 8) {
      const uint64_t v = (*this)();
      __builtin_memcpy(out.data() + i, &v, 8);
    }
    if (i < out.size()) {
      const uint64_t v = (*this)();
      __builtin_memcpy(out.data() + i, &v, out.size() - i);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Fisher-Yates shuffle with Rng (portable, unlike std::shuffle).
template <typename T>
void Shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = rng.Below(i);
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace spoke::bench
