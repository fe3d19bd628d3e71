// fp16: IEEE half precision, round to nearest even, saturating at +-65504 (2 bytes each).
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
    auto* h = reinterpret_cast<uint16_t*>(out.data());
    for (int64_t i = 0; i < n; ++i) h[i] = ToHalf(x[i]);
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    if (size != static_cast<size_t>(2 * n)) return SizeError(size, 2 * n, n);
    for (int64_t i = 0; i < n; ++i) out[i] = FromHalf(Load<uint16_t>(data + 2 * i));
    return Status();
  }
};

}  // namespace

std::unique_ptr<Codec> MakeFp16(const CodecSpec& spec) { return std::make_unique<Fp16>(spec); }

}  // namespace hetps::compress
