#include <cmath>

#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// FTRL-Proximal (McMahan et al., KDD'13, Algorithm 1), per coordinate with state z and n:
//   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma w;  n += g^2;
//   w = 0 if |z| <= l1, else -(z - sgn(z) l1) / ((beta + sqrt(n)) / alpha + l2).
// alpha is lr. The CTR standard for sparse tables: l1 keeps rare features' weights at 0.
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(const AlgorithmSpec& spec)
      : alpha_(spec.Number("lr")),
        beta_(spec.Number("beta")),
        l1_(spec.Number("l1")),
        l2_(spec.Number("l2")),
        wd_(spec.Number("weight_decay")) {}
  int num_slots() const override { return 2; }
  void Apply(float* w, const float* g, int64_t n, float* const* slots, int64_t,
             float scale) const override {
    float* z = slots[0];
    float* acc = slots[1];
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(scale) * g[i] + wd_ * w[i];
      const double before = acc[i], after = before + gi * gi;
      const double sigma = (std::sqrt(after) - std::sqrt(before)) / alpha_;
      const double zi = z[i] + gi - sigma * w[i];
      z[i] = static_cast<float>(zi);
      acc[i] = static_cast<float>(after);
      w[i] = std::abs(zi) <= l1_ ? 0.0f
                                 : static_cast<float>(-(zi - std::copysign(l1_, zi)) /
                                                      ((beta_ + std::sqrt(after)) / alpha_ + l2_));
    }
  }

 private:
  double alpha_, beta_, l1_, l2_, wd_;
};

}  // namespace

void RegisterFtrl(OptimizerRegistry& r) {
  std::vector<ParamDef> params = CommonOptimizerParams();
  params[0].help = "alpha, the per-coordinate learning rate's scale";
  params.push_back(ParamDef::Real("beta", "1", 0, 1e6, "smooths the learning rate at the start"));
  params.push_back(ParamDef::Real("l1", "0", 0, 1e6, "L1 strength: |z| <= l1 keeps w at 0"));
  params.push_back(ParamDef::Real("l2", "0", 0, 1e6, "L2 strength"));
  r.Add({"ftrl", "FTRL-Proximal per coordinate (McMahan et al., KDD'13), for sparse features",
         params},
        {[](const AlgorithmSpec& spec) { return std::make_unique<Ftrl>(spec); }});
}

}  // namespace hetps
