// onebit (1-bit SGD, error feedback on by default): bit i = [p_i < 0]; decodes to the mean of
// the negative elements where set and the mean of the non-negative ones elsewhere, so the sum
// of each sign's elements is kept. Wire: float negative mean, float non-negative mean, n bits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/compress/codecs.h"
#include "common/compress/sign.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class OneBit : public Codec {
 public:
  using Codec::Codec;
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override { return 8 + BitBytes(n, 1); }
  void Encode(const float* x, int64_t n, const CodecContext&, CodecState*,
              std::vector<uint8_t>& out) const override {
    out.assign(8 + BitBytes(n, 1), 0);
    const double negative_sum =
        FixedOrderSum(n, [&](int64_t i) { return static_cast<double>(x[i] < 0.0f ? x[i] : 0.0f); });
    const double total = FixedOrderSum(n, [&](int64_t i) { return static_cast<double>(x[i]); });
    int64_t negative_count = 0;  // exact in any order (the GPU sums it as doubles, also exact)
    for (int64_t i = 0; i < n; ++i) negative_count += x[i] < 0.0f;
    const auto negatives = static_cast<double>(negative_count);
    const float means[2] = {
        negatives > 0 ? static_cast<float>(negative_sum / negatives) : 0.0f,
        n - negatives > 0 ? static_cast<float>((total - negative_sum) / (n - negatives)) : 0.0f};
    std::memcpy(out.data(), means, 8);
    PackSigns(x, n, out.data() + 8);
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    const int64_t want = 8 + BitBytes(n, 1);
    if (size != static_cast<size_t>(want)) return SizeError(size, want, n);
    const float negative = Load<float>(data), positive = Load<float>(data + 4);
    if (!std::isfinite(negative) || !std::isfinite(positive) || negative > 0 || positive < 0) {
      return Status::Malformed(fmt::format(
          "onebit: means {} / {} are not finite with the right signs", negative, positive));
    }
    DecodeSigns(data + 8, n, negative, positive, out);
    return Status();
  }
};

}  // namespace

void RegisterOneBit(CodecRegistry& r) {
  r.Add({"onebit", "1-bit SGD: sign bits, each sign decoded to its mean", {EfParam(true)}},
        {[](const CodecSpec& spec) { return std::make_unique<OneBit>(spec); }});
}

}  // namespace hetps::compress
