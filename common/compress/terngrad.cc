// terngrad (seed): clip to 2.5 standard deviations, s = max |clipped|, b_i ~ Bernoulli(|g_i| / s)
// (Philox), values in {-s, 0, +s}. Wire: float s, then 2 bits per element (0: zero, 1: +s,
// 2: -s; 3 is malformed).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/compress/codecs.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class TernGrad : public Codec {
 public:
  explicit TernGrad(const CodecSpec& spec)
      : Codec(spec), seed_(static_cast<uint64_t>(Param("seed"))) {}
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override { return 4 + BitBytes(n, 2); }
  void Encode(const float* x, int64_t n, const CodecContext& ctx, CodecState*,
              std::vector<uint8_t>& out) const override {
    out.assign(4 + BitBytes(n, 2), 0);
    if (n == 0) return;
    const double mean = FixedOrderSum(n, [&](int64_t i) { return static_cast<double>(x[i]); }) / n;
    const double square =
        FixedOrderSum(n, [&](int64_t i) { return static_cast<double>(x[i]) * x[i]; }) / n;
    const auto clip = static_cast<float>(2.5 * std::sqrt(std::max(0.0, square - mean * mean)));
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s = std::max(s, std::min(std::fabs(x[i]), clip));
    std::memcpy(out.data(), &s, 4);
    if (!(s > 0)) return;
    RngKey key = ctx.key;
    key.seed = seed_;
    for (int64_t i = 0; i < n; ++i) {
      const float magnitude = std::min(std::fabs(x[i]), clip);
      if (Uniform(key, static_cast<uint64_t>(i)) < magnitude / s) {
        PutBits(out.data() + 4, 2 * i, x[i] < 0 ? 2u : 1u, 2);
      }
    }
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    const int64_t want = 4 + BitBytes(n, 2);
    if (size != static_cast<size_t>(want)) return SizeError(size, want, n);
    const float s = Load<float>(data);
    if (!std::isfinite(s) || s < 0) {
      return Status::Malformed(fmt::format("terngrad: scale {} is not finite and >= 0", s));
    }
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = GetBits(data + 4, 2 * i, 2);
      if (code == 3) return Status::Malformed(fmt::format("terngrad: element {} has code 3", i));
      out[i] = code == 0 ? 0.0f : (code == 1 ? s : -s);
    }
    return Status();
  }

 private:
  uint64_t seed_;
};

}  // namespace

void RegisterTernGrad(CodecRegistry& r) {
  r.Add({"terngrad",
         "TernGrad: clipped at 2.5 sigma, values in {-s, 0, s}, 2 bits each",
         {Seed(), EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<TernGrad>(spec); }});
}

}  // namespace hetps::compress
