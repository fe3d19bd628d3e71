// DC-ASGD (Zheng et al., ICML'17; ALGORITHMS.md §6): g + lambda * g*g*(w - w_bak[m]), w_bak[m]
// = the values worker m last read (g itself before its first read). Its adaptive form
// DC-ASGD-a takes lambda = lambda0 / sqrt(MS + eps) element-wise, MS = ms_decay * MS +
// (1 - ms_decay) * g*g over every push of the partition. Both loops run vectorized
// (server/vectorized.h; this file is compiled with -fno-math-errno for the sqrt).
#include <cmath>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/aggregation/compensator.h"
#include "server/vectorized.h"

namespace hetps {
namespace {

class Dcasgd final : public Compensator {
 public:
  Dcasgd(const AlgorithmSpec& spec, bool adaptive)
      : adaptive_(adaptive),
        lambda_(static_cast<float>(spec.Number("lambda"))),
        lambda0_(static_cast<float>(spec.Number("lambda0"))),
        ms_decay_(static_cast<float>(spec.Number("ms_decay"))) {}

  const float* Compensate(const CompensationInput& in, const float* g,
                          std::vector<float>& out) override {
    const int64_t n = in.n;
    if (adaptive_ && mean_square_.empty()) mean_square_.assign(n, 0.0f);
    float* ms = mean_square_.data();
    if (adaptive_) {
      const float decay = ms_decay_;
      RunVectorized([=] {
        for (int64_t i = 0; i < n; ++i) ms[i] = decay * ms[i] + (1 - decay) * g[i] * g[i];
      });
    }
    if (in.read == nullptr) return g;
    out.resize(n);
    float* o = out.data();
    const float *values = in.values, *read = in.read;
    if (adaptive_) {
      const float lambda0 = lambda0_;
      RunVectorized([=] {
        for (int64_t i = 0; i < n; ++i) {
          const float lambda = lambda0 / std::sqrt(ms[i] + kEpsilon);
          o[i] = g[i] + lambda * g[i] * g[i] * (values[i] - read[i]);
        }
      });
    } else {
      const float lambda = lambda_;
      RunVectorized([=] {
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] + lambda * g[i] * g[i] * (values[i] - read[i]);
      });
    }
    return o;
  }
  bool needs_reads() const override { return true; }

  void Save(proto::AggregatorState& out) const override {
    if (!mean_square_.empty()) (*out.mutable_floats())["mean_square"] = FloatBytes(mean_square_);
  }
  Status Load(const proto::AggregatorState& in) override {
    auto it = in.floats().find("mean_square");
    return it == in.floats().end() ? Status() : FloatsFrom(it->second, mean_square_);
  }

 private:
  static constexpr float kEpsilon = 1e-7f;
  bool adaptive_;
  float lambda_, lambda0_, ms_decay_;
  std::vector<float> mean_square_;  // DC-ASGD-a: MS per element of the partition
};

}  // namespace

void RegisterDcasgd(CompensatorRegistry& r) {
  r.Add({"dcasgd",
         "DC-ASGD (Zheng et al., ICML'17): g + lambda g*g*(w - w_read)",
         {ParamDef::Real("lambda", "0.04", 0, 1e6, "DC-ASGD's lambda")}},
        {[](const AlgorithmSpec& spec) { return std::make_unique<Dcasgd>(spec, false); }});
  r.Add({"dcasgd_a",
         "DC-ASGD-a: DC-ASGD with lambda = lambda0 / sqrt(mean square of g) per element",
         {ParamDef::Real("lambda0", "2", 0, 1e6, "DC-ASGD-a's lambda0"),
          ParamDef::Real("ms_decay", "0.95", 0, 0.999999,
                         "DC-ASGD-a: the mean square's decay per push")}},
        {[](const AlgorithmSpec& spec) { return std::make_unique<Dcasgd>(spec, true); }});
}

}  // namespace hetps
