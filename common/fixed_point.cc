#include "common/fixed_point.h"

#include <algorithm>
#include <cmath>

namespace hetps {
namespace {

constexpr int kMaxBits = 24;

}  // namespace

int FixedPointBits(double total_weight) {
  if (!(total_weight > 0)) return kMaxBits;
  const double room = std::ldexp(1.0, 30) / total_weight;
  if (room < 2) return 0;
  return std::min(kMaxBits, static_cast<int>(std::floor(std::log2(room))));
}

void EncodeFixedPoint(const float* x, int64_t n, double weight, const FixedPoint& fp,
                      uint32_t* words) {
  const double scale = weight * std::ldexp(1.0, fp.bits) / fp.clip;
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::clamp(static_cast<double>(x[i]), -fp.clip, fp.clip) * scale;
    words[i] = static_cast<uint32_t>(static_cast<int32_t>(std::llround(v)));
  }
}

void DecodeFixedPoint(const uint32_t* sum, int64_t n, const FixedPoint& fp, float* out) {
  const double unit = fp.clip / std::ldexp(1.0, fp.bits);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(static_cast<int32_t>(sum[i])) * unit);
  }
}

}  // namespace hetps
