#include <cmath>

#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// h <- h + g^2; w <- w - lr * g / (sqrt(h) + eps)
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerOptions& o)
      : lr_(static_cast<float>(o.lr)),
        eps_(static_cast<float>(o.epsilon)),
        wd_(static_cast<float>(o.weight_decay)) {}
  int num_slots() const override { return 1; }
  void Apply(float* w, const float* g, int64_t n, float* const* slots, int64_t,
             float scale) const override {
    float* h = slots[0];
    const float lr = lr_, eps = eps_, wd = wd_;
    RunVectorized([=] {
      for (int64_t i = 0; i < n; ++i) {
        const float gi = scale * g[i] + wd * w[i];
        h[i] += gi * gi;
        w[i] -= lr * gi / (std::sqrt(h[i]) + eps);
      }
    });
  }
  // Row-wise Adagrad (FBGEMM's): one accumulator per row, G += mean(g^2), w -= lr g / (sqrt(G)
  // + eps).
  int64_t RowStateFloats(int64_t) const override { return 1; }
  void ApplyRow(float* w, const float* g, int64_t dim, float* state, float scale) const override {
    float sum = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const float gi = scale * g[i] + wd_ * w[i];
      sum += gi * gi;
    }
    state[0] += sum / static_cast<float>(dim);
    const float step = lr_ / (std::sqrt(state[0]) + eps_);
    for (int64_t i = 0; i < dim; ++i) w[i] -= step * (scale * g[i] + wd_ * w[i]);
  }

 private:
  float lr_, eps_, wd_;
};

}  // namespace

void RegisterAdagrad(OptimizerRegistry& r) {
  std::vector<ParamDef> params = CommonOptimizerParams();
  params.push_back(ParamDef::Real("epsilon", "1e-8", 0, 1, "denominator guard"));
  r.Add({"adagrad",
         "Adagrad: per-coordinate lr / sqrt(sum of g^2); on tables row-wise (one sum per row)",
         params},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<Adagrad>(OptimizerOptions::FromSpec(spec));
        }});
}

}  // namespace hetps
