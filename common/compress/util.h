// Helpers shared by the codecs (CPU) and mirrored exactly by their CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hetps::compress {

// Elements a sparsifier keeps of n at `density`: ceil(density * n), at least 1, at most n.
inline int64_t KeepCount(int64_t n, double density) {
  if (n <= 0) return 0;
  const auto k = static_cast<int64_t>(std::ceil(density * static_cast<double>(n)));
  return k < 1 ? 1 : (k > n ? n : k);
}

// Sums in a fixed order so that a CUDA reduction that follows it gets the identical bits: in
// double, without fused multiply-add; within each chunk of kSumChunk elements, element i goes
// to lane i % kSumLanes (each lane in sequence), the lanes are added in order, then the chunk
// totals in order. The independent lanes let the compiler vectorize without reordering.
constexpr int64_t kSumChunk = 1024;
constexpr int kSumLanes = 8;

template <typename F>
double FixedOrderSum(int64_t n, F term) {
  double total = 0;
  for (int64_t begin = 0; begin < n; begin += kSumChunk) {
    const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
    double lane[kSumLanes] = {};
    int64_t i = begin;
    for (; i + kSumLanes <= end; i += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) lane[l] += term(i + l);
    }
    for (int l = 0; i < end; ++i, ++l) lane[l] += term(i);
    double chunk = 0;
    for (int l = 0; l < kSumLanes; ++l) chunk += lane[l];
    total += chunk;
  }
  return total;
}

// A little-endian bit stream: element i's w-bit code occupies bits [i*w, (i+1)*w).
inline int64_t BitBytes(int64_t n, int width) { return (n * width + 7) / 8; }

inline void PutBits(uint8_t* out, int64_t bit, uint32_t code, int width) {
  for (int b = 0; b < width; ++b, ++bit) {
    if (code >> b & 1u) out[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
  }
}

inline uint32_t GetBits(const uint8_t* in, int64_t bit, int width) {
  uint32_t code = 0;
  for (int b = 0; b < width; ++b, ++bit)
    code |= static_cast<uint32_t>(in[bit >> 3] >> (bit & 7) & 1u) << b;
  return code;
}

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// float -> IEEE half, round to nearest even; magnitudes beyond the half range saturate to
// +-65504 (an overflowing gradient should not become infinity). NaN stays NaN.
inline float SaturateHalf(float f) {
  if (f > 65504.0f) return 65504.0f;
  if (f < -65504.0f) return -65504.0f;
  return f;
}

#ifdef __FLT16_MAX__  // the compiler has _Float16 (g++ 12; clang from 15 on x86)
inline uint16_t ToHalf(float f) {
  const _Float16 h = static_cast<_Float16>(SaturateHalf(f));
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

inline float FromHalf(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}
#else  // the same conversions by hand (clang 14 builds the fuzz targets: deploy/fuzz.sh)
inline uint16_t ToHalf(float f) {
  f = SaturateHalf(f);
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x > 0x7f800000) return sign | 0x7e00 | static_cast<uint16_t>((x >> 13) & 0x3ff);  // NaN
  if (x < 0x38800000) {  // below 2^-14: a subnormal half, rounded to nearest even
    float magnitude;
    std::memcpy(&magnitude, &x, sizeof(x));
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t h = ((x >> 23) - 112) << 10 | ((x & 0x7fffff) >> 13);
  const uint32_t rest = x & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry moves into the exponent
  return sign | static_cast<uint16_t>(h);
}

inline float FromHalf(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  uint32_t x;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in a float
    const float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    std::memcpy(&x, &magnitude, sizeof(x));
    x |= sign;
  } else if (exponent == 31) {
    x = sign | 0x7f800000 | mantissa << 13;
  } else {
    x = sign | (exponent + 112) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}
#endif

// Whole arrays, with the CPU's F16C conversions when it has them (same rounding).
void ToHalf(const float* x, int64_t n, uint16_t* out);
void FromHalf(const uint16_t* in, int64_t n, float* out);

}  // namespace hetps::compress
