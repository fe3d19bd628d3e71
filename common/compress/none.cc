// none: the float32 values as they are (4 bytes each).
#include <cstring>

#include "common/compress/codecs.h"

namespace hetps::compress {
namespace {

class None : public Codec {
 public:
  using Codec::Codec;
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override { return 4 * n; }
  void Encode(const float* x, int64_t n, const CodecContext&, CodecState*,
              std::vector<uint8_t>& out) const override {
    out.resize(4 * n);
    std::memcpy(out.data(), x, out.size());
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    if (size != static_cast<size_t>(4 * n)) return SizeError(size, 4 * n, n);
    std::memcpy(out, data, size);
    return Status();
  }
};

}  // namespace

void RegisterNone(CodecRegistry& r) {
  r.Add({"none", "float32 as it is (4 bytes per value)", {EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<None>(spec); }});
}

}  // namespace hetps::compress
