// dgc (Deep Gradient Compression; density, momentum, sample, warmup, epoch): momentum
// correction u <- m u + g, local accumulation v <- v + u; the threshold comes from the top
// density of a strided sample of |v| (a `sample` fraction), re-adjusted (x1.3 / x0.8, then
// bisection once bracketed; at most 10 times) until between 0.8k and 1.3k elements pass; those
// of v are sent and both v and u are cleared there (momentum-factor masking). Warm-up: for the
// first `warmup` epochs of `epoch` steps the density is density^((e+1)/(warmup+1)). The rules
// are in dgc.h, shared with the CUDA twin. Wire: uint32 count, then count ascending indices and
// their values.
#include "common/compress/dgc.h"

#include <algorithm>
#include <cmath>

#include "common/compress/codecs.h"
#include "common/compress/sparse.h"

namespace hetps::compress {
namespace {

struct DgcState : CodecState {
  explicit DgcState(int64_t n) : u(n, 0.0f), v(n, 0.0f) {}
  std::vector<float> u, v;
};

class Dgc : public Codec {
 public:
  explicit Dgc(const CodecSpec& spec)
      : Codec(spec),
        density_(Param("density")),
        momentum_(static_cast<float>(Param("momentum"))),
        sample_(Param("sample")),
        warmup_(static_cast<int64_t>(Param("warmup"))),
        epoch_(static_cast<int64_t>(Param("epoch"))) {}

  std::unique_ptr<CodecState> NewState(int64_t n) const override {
    return std::make_unique<DgcState>(n);
  }
  const std::vector<float>* Unsent(const CodecState* state) const override {
    return state ? &static_cast<const DgcState*>(state)->v : nullptr;
  }
  int64_t EncodedBytes(int64_t, const CodecContext&) const override { return -1; }

  void Encode(const float* g, int64_t n, const CodecContext& ctx, CodecState* state,
              std::vector<uint8_t>& out) const override {
    DgcState fresh(state ? 0 : n);
    auto& s = state ? static_cast<DgcState&>(*state) : fresh;
    for (int64_t i = 0; i < n; ++i) {
      s.u[i] = momentum_ * s.u[i] + g[i];
      s.v[i] += s.u[i];
    }
    const int64_t k = KeepCount(n, DgcDensity(density_, warmup_, epoch_, ctx.key.step));
    const DgcSample sampling = DgcSampling(n, sample_);
    std::vector<float> sample(sampling.count);
    for (int64_t j = 0; j < sampling.count; ++j) sample[j] = std::fabs(s.v[j * sampling.stride]);
    auto passes = [&](int64_t i, float threshold) {
      return s.v[i] != 0.0f && std::fabs(s.v[i]) >= threshold;
    };
    const float threshold =
        DgcAdjustThreshold(DgcFirstThreshold(sample, k, n), k, [&](float threshold) {
          int64_t count = 0;
          for (int64_t i = 0; i < n; ++i) count += passes(i, threshold);
          return count;
        });
    std::vector<uint32_t> sent;
    for (int64_t i = 0; i < n; ++i) {
      if (passes(i, threshold)) sent.push_back(static_cast<uint32_t>(i));
    }
    const auto count = static_cast<uint32_t>(sent.size());
    out.resize(4 + 8 * static_cast<size_t>(count));
    std::memcpy(out.data(), &count, 4);
    auto* idx = reinterpret_cast<uint32_t*>(out.data() + 4);
    auto* val = reinterpret_cast<float*>(out.data() + 4 + 4 * static_cast<size_t>(count));
    for (uint32_t j = 0; j < count; ++j) {
      idx[j] = sent[j];
      val[j] = s.v[sent[j]];
      s.v[sent[j]] = 0;
      s.u[sent[j]] = 0;
    }
  }

  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    if (size < 4) return SizeError(size, 4, n);
    const int64_t count = Load<uint32_t>(data);
    if (count > n || size != static_cast<size_t>(4 + 8 * count)) {
      return Status::SizeMismatch(
          fmt::format("dgc: {} bytes cannot hold {} (index, value) pairs of a {}-element partition",
                      size, count, n));
    }
    return DecodeSparse(data + 4, count, n, out, "dgc");
  }

 private:
  double density_;
  float momentum_;
  double sample_;
  int64_t warmup_, epoch_;
};

}  // namespace

void RegisterDgc(CodecRegistry& r) {
  r.Add({"dgc",
         "Deep Gradient Compression: momentum correction, sampled threshold, warm-up",
         {Density("0.001"), ParamDef::Real("momentum", "0.9", 0, 1, "momentum correction m"),
          ParamDef::Real("sample", "0.01", 0, 1, "fraction of |v| sampled for the threshold", true),
          ParamDef::Int("warmup", "0", 0, 1000, "warm-up epochs"),
          ParamDef::Int("epoch", "1000", 1, 1e12, "steps per warm-up epoch"), EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<Dgc>(spec); }});
}

}  // namespace hetps::compress
