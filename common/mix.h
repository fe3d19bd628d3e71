// splitmix64 (Steele, Lea, Flood, OOPSLA 2014), for values that must be pure, well-spread
// functions of a key or a seed: table sharding, initializers, seeded data.
#pragma once

#include <cstdint>

namespace hetps {

// The finalizer: every input bit reaches every output bit.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One step: the golden-ratio increment, then the finalizer.
inline uint64_t SplitMix64(uint64_t x) { return Mix64(x + 0x9e3779b97f4a7c15ULL); }

// A uniform double in (0, 1) from the top 53 bits.
inline double UnitOf(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace hetps
