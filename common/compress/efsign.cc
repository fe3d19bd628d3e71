// efsign (EF-SignSGD, error feedback on by default): Delta = (||p||_1 / n) sgn(p), zero counted
// as positive. Wire: the float scale, then n sign bits.
#include <cmath>
#include <cstring>

#include "common/compress/codecs.h"
#include "common/compress/sign.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class EfSign : public Codec {
 public:
  using Codec::Codec;
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override { return 4 + BitBytes(n, 1); }
  void Encode(const float* x, int64_t n, const CodecContext&, CodecState*,
              std::vector<uint8_t>& out) const override {
    out.assign(4 + BitBytes(n, 1), 0);
    const double l1 =
        FixedOrderSum(n, [&](int64_t i) { return std::fabs(static_cast<double>(x[i])); });
    const float scale = n ? static_cast<float>(l1 / static_cast<double>(n)) : 0.0f;
    std::memcpy(out.data(), &scale, 4);
    PackSigns(x, n, out.data() + 4);
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    const int64_t want = 4 + BitBytes(n, 1);
    if (size != static_cast<size_t>(want)) return SizeError(size, want, n);
    const float scale = Load<float>(data);
    if (!std::isfinite(scale) || scale < 0) {
      return Status::Malformed(fmt::format("efsign: scale {} is not finite and >= 0", scale));
    }
    DecodeSigns(data + 4, n, -scale, scale, out);
    return Status();
  }
};

}  // namespace

void RegisterEfSign(CodecRegistry& r) {
  r.Add({"efsign", "EF-SignSGD: (||p||_1 / n) sgn(p)", {EfParam(true)}},
        {[](const CodecSpec& spec) { return std::make_unique<EfSign>(spec); }});
}

}  // namespace hetps::compress
