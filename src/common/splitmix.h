// SplitMix64: a tiny, well-mixed 64-bit hash for deriving deterministic pseudo-random values
// (simulated tokens) from integers.
#pragma once

#include <cstdint>

namespace kvgate {

inline constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace kvgate
