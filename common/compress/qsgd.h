// QSGD's per-element code, shared by the CPU codec and its CUDA kernel (host and device).
#pragma once

#include <cstdint>

#include "common/compress/philox.h"

namespace hetps::compress {

// Bits per element: a sign bit and ceil(log2(levels + 1)) level bits.
HETPS_HD int QsgdWidth(uint32_t levels) {
  int bits = 0;
  while ((uint64_t{1} << bits) < uint64_t{levels} + 1) ++bits;
  return 1 + bits;
}

// sign in bit 0, level = floor(s |v| / norm) + Bernoulli(fraction) above it.
HETPS_HD uint32_t QsgdCode(float v, float norm, uint32_t levels, const RngKey& key, int64_t i) {
  const float magnitude = v < 0 ? -v : v;
  uint32_t level = 0;
  if (norm > 0) {
    float r = static_cast<float>(levels) * magnitude / norm;
    if (!(r <= static_cast<float>(levels))) r = r > 0 ? static_cast<float>(levels) : 0.0f;  // NaN
    const float floor_r = static_cast<float>(static_cast<uint32_t>(r));
    level = static_cast<uint32_t>(floor_r);
    if (Uniform(key, static_cast<uint64_t>(i)) < r - floor_r) ++level;
    if (level > levels) level = levels;  // |v| <= norm; guards rounding
  }
  return level << 1 | (v < 0 ? 1u : 0u);
}

}  // namespace hetps::compress
