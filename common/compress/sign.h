// Sign-bit layouts shared by onebit and efsign: bit i (LSB first within each byte) set when
// element i is negative.
#pragma once

#include <cstdint>

namespace hetps::compress {

inline void PackSigns(const float* x, int64_t n, uint8_t* bits) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint8_t byte = 0;
    for (int b = 0; b < 8; ++b) byte |= static_cast<uint8_t>((x[i + b] < 0.0f) << b);
    bits[i >> 3] = byte;
  }
  if (i < n) {
    uint8_t byte = 0;
    for (int b = 0; i + b < n; ++b) byte |= static_cast<uint8_t>((x[i + b] < 0.0f) << b);
    bits[i >> 3] = byte;
  }
}

inline bool Negative(const uint8_t* bits, int64_t i) { return bits[i >> 3] >> (i & 7) & 1; }

// out[i] = negative where bit i is set, else positive.
inline void DecodeSigns(const uint8_t* bits, int64_t n, float negative, float positive,
                        float* out) {
  const float values[2] = {positive, negative};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const unsigned byte = bits[i >> 3];
    for (int b = 0; b < 8; ++b) out[i + b] = values[byte >> b & 1u];
  }
  for (; i < n; ++i) out[i] = values[Negative(bits, i)];
}

}  // namespace hetps::compress
