// qsgd (levels s, seed): v -> (||v||, sign_i, l_i) with l_i = floor(s |v_i| / ||v||) plus a
// Bernoulli(frac) draw from Philox; decodes to ||v|| sgn_i l_i / s. Wire: the float norm, then
// per element a (1 + ceil(log2(s + 1)))-bit code (sign in bit 0, level above), packed.
#include "common/compress/qsgd.h"

#include <cmath>
#include <cstring>

#include "common/compress/codecs.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class Qsgd : public Codec {
 public:
  explicit Qsgd(const CodecSpec& spec)
      : Codec(spec),
        levels_(static_cast<uint32_t>(Param("levels"))),
        width_(QsgdWidth(levels_)),
        seed_(static_cast<uint64_t>(Param("seed"))) {}
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override {
    return 4 + BitBytes(n, width_);
  }
  void Encode(const float* x, int64_t n, const CodecContext& ctx, CodecState*,
              std::vector<uint8_t>& out) const override {
    const float norm = static_cast<float>(
        std::sqrt(FixedOrderSum(n, [&](int64_t i) { return static_cast<double>(x[i]) * x[i]; })));
    out.assign(4 + BitBytes(n, width_), 0);
    std::memcpy(out.data(), &norm, 4);
    RngKey key = ctx.key;
    key.seed = seed_;
    for (int64_t i = 0; i < n; ++i) {
      PutBits(out.data() + 4, i * width_, QsgdCode(x[i], norm, levels_, key, i), width_);
    }
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    const int64_t want = 4 + BitBytes(n, width_);
    if (size != static_cast<size_t>(want)) return SizeError(size, want, n);
    const float norm = Load<float>(data);
    if (!std::isfinite(norm) || norm < 0) {
      return Status::Malformed(
          fmt::format("qsgd: norm {} is not a finite non-negative number", norm));
    }
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = GetBits(data + 4, i * width_, width_);
      const uint32_t level = code >> 1;
      if (level > levels_) {
        return Status::Malformed(
            fmt::format("qsgd: element {} has level {} above {}", i, level, levels_));
      }
      const float q = norm * static_cast<float>(level) / static_cast<float>(levels_);
      out[i] = code & 1u ? -q : q;
    }
    return Status();
  }

 private:
  uint32_t levels_;
  int width_;
  uint64_t seed_;
};

}  // namespace

void RegisterQsgd(CodecRegistry& r) {
  r.Add(
      {"qsgd",
       "QSGD: stochastic quantisation to s levels of |v_i| / ||v||",
       {ParamDef::Int("levels", "16", 1, 65535, "quantisation levels s"), Seed(), EfParam(false)}},
      {[](const CodecSpec& spec) { return std::make_unique<Qsgd>(spec); }});
}

}  // namespace hetps::compress
