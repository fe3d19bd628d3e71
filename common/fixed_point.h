// Fixed-point words in Z_2^32 that add up exactly: a coordinate x (weight w) becomes the word
// round(w * clamp(x, -clip, clip) * 2^bits / clip) mod 2^32, so that words add up exactly, and
// the sum of a group's words, read as a signed 32-bit integer, times clip / 2^bits is
// sum_k w_k clamp(x_k) (each word within 1/2 of its real value; bits chosen so the sum never
// wraps: FixedPointBits). Secure aggregation masks them (common/secagg/masks.h); the aggregation
// tier's switch emulation sums them in its slots (aggregator/switch_sum.h).
#pragma once

#include <cstdint>

namespace hetps {

struct FixedPoint {
  double clip = 8;  // coordinates are clipped to [-clip, clip]
  int bits = 16;    // 2^bits / clip words per unit of weighted update
};

// The most bits (at most 24) for words whose weights sum to at most `total_weight`, such that
// their sum stays below 2^30 in magnitude (no wrap, with room for rounding); 0 when not even
// one bit fits.
int FixedPointBits(double total_weight);

// words[i] = the fixed-point word of weight * x[i].
void EncodeFixedPoint(const float* x, int64_t n, double weight, const FixedPoint& fp,
                      uint32_t* words);
// out[i] = the weighted sum that the summed words `sum` stand for.
void DecodeFixedPoint(const uint32_t* sum, int64_t n, const FixedPoint& fp, float* out);

}  // namespace hetps
