// randomk (density, seed, unbiased): k = ceil(density * n) distinct indices drawn from a keyed
// permutation of the partition (Philox keyed by seed, partition and step, so the server draws
// the same ones); only the k values travel (4k bytes), scaled by n / k when unbiased (default).
#include "common/compress/codecs.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

class RandomK : public Codec {
 public:
  explicit RandomK(const CodecSpec& spec)
      : Codec(spec),
        density_(Param("density")),
        seed_(static_cast<uint64_t>(Param("seed"))),
        unbiased_(Param("unbiased") == 1) {}
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override {
    return 4 * KeepCount(n, density_);
  }
  void Encode(const float* x, int64_t n, const CodecContext& ctx, CodecState*,
              std::vector<uint8_t>& out) const override {
    const int64_t k = KeepCount(n, density_);
    const float scale = Scale(n, k);
    const Permutation perm(Key(ctx), static_cast<uint64_t>(n));
    out.resize(4 * k);
    auto* val = reinterpret_cast<float*>(out.data());
    for (int64_t j = 0; j < k; ++j) val[j] = x[perm(j)] * scale;
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext& ctx,
                float* out) const override {
    const int64_t k = KeepCount(n, density_);
    if (size != static_cast<size_t>(4 * k)) return SizeError(size, 4 * k, n);
    std::fill_n(out, n, 0.0f);
    const Permutation perm(Key(ctx), static_cast<uint64_t>(n));
    for (int64_t j = 0; j < k; ++j) out[perm(j)] = Load<float>(data + 4 * j);
    return Status();
  }

 private:
  float Scale(int64_t n, int64_t k) const {
    return unbiased_ ? static_cast<float>(n) / static_cast<float>(k) : 1.0f;
  }
  RngKey Key(const CodecContext& ctx) const {
    RngKey key = ctx.key;
    key.seed = seed_;
    return key;
  }
  double density_;
  uint64_t seed_;
  bool unbiased_;
};

}  // namespace

void RegisterRandomK(CodecRegistry& r) {
  r.Add({"randomk",
         "k = ceil(density n) indices from a keyed permutation; only values travel",
         {Density("0.01"), Seed(), ParamDef::Int("unbiased", "1", 0, 1, "scale by n / k"),
          EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<RandomK>(spec); }});
}

}  // namespace hetps::compress
