#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// Heavy-ball: v <- mu * v + (g + wd * w); w <- w - lr * v
class Momentum final : public Optimizer {
 public:
  explicit Momentum(const OptimizerOptions& o)
      : lr_(static_cast<float>(o.lr)),
        mu_(static_cast<float>(o.momentum)),
        wd_(static_cast<float>(o.weight_decay)) {}
  int num_slots() const override { return 1; }
  void Apply(float* w, const float* g, int64_t n, float* const* slots, int64_t,
             float scale) const override {
    float* v = slots[0];
    const float lr = lr_, mu = mu_, wd = wd_;
    RunVectorized([=] {
      for (int64_t i = 0; i < n; ++i) {
        v[i] = mu * v[i] + scale * g[i] + wd * w[i];
        w[i] -= lr * v[i];
      }
    });
  }

 private:
  float lr_, mu_, wd_;
};

}  // namespace

void RegisterMomentum(OptimizerRegistry& r) {
  std::vector<ParamDef> params = CommonOptimizerParams();
  params.push_back(ParamDef::Real("momentum", "0.9", 0, 1, "m"));
  r.Add({"momentum", "heavy-ball momentum: u = m u + g; w -= lr u", params},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<Momentum>(OptimizerOptions::FromSpec(spec));
        }});
}

}  // namespace hetps
