// fp16: IEEE half precision, round to nearest even, saturating at +-65504 (2 bytes each).
#include <immintrin.h>

#include <cstdint>

#include "common/compress/codecs.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class Fp16 : public Codec {
 public:
  using Codec::Codec;
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override { return 2 * n; }
  void Encode(const float* x, int64_t n, const CodecContext&, CodecState*,
              std::vector<uint8_t>& out) const override {
    out.resize(2 * n);
    ToHalf(x, n, reinterpret_cast<uint16_t*>(out.data()));
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    if (size != static_cast<size_t>(2 * n)) return SizeError(size, 2 * n, n);
    if (reinterpret_cast<uintptr_t>(data) % alignof(uint16_t) == 0) {
      FromHalf(reinterpret_cast<const uint16_t*>(data), n, out);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = FromHalf(Load<uint16_t>(data + 2 * i));
    }
    return Status();
  }
};

}  // namespace

__attribute__((target("avx,f16c"))) static void ToHalfF16c(const float* x, int64_t n,
                                                           uint16_t* out) {
  int64_t i = 0;
  const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    // min/max return the second operand for NaN: put v second so NaN passes through.
    v = _mm256_min_ps(hi, v);
    v = _mm256_max_ps(lo, v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = ToHalf(x[i]);
}

__attribute__((target("avx,f16c"))) static void FromHalfF16c(const uint16_t* in, int64_t n,
                                                             float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = FromHalf(in[i]);
}

// clang 14 (the fuzz build) knows no "f16c" here: it converts without F16C.
static bool HasF16c() {
#if defined(__clang__) && __clang_major__ < 15
  return false;
#else
  return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif
}

void ToHalf(const float* x, int64_t n, uint16_t* out) {
  static const bool f16c = HasF16c();
  if (f16c) return ToHalfF16c(x, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = ToHalf(x[i]);
}

void FromHalf(const uint16_t* in, int64_t n, float* out) {
  static const bool f16c = HasF16c();
  if (f16c) return FromHalfF16c(in, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = FromHalf(in[i]);
}

void RegisterFp16(CodecRegistry& r) {
  r.Add({"fp16",
         "IEEE half precision, round to nearest even, saturating (2 bytes per value)",
         {EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<Fp16>(spec); }});
}

}  // namespace hetps::compress
