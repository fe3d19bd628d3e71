#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// w <- w - lr * (g + wd * w)
class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerOptions& o)
      : lr_(static_cast<float>(o.lr)), wd_(static_cast<float>(o.weight_decay)) {}
  int num_slots() const override { return 0; }
  void Apply(float* w, const float* g, int64_t n, float* const*, int64_t,
             float scale) const override {
    const float step = lr_ * scale;
    if (wd_ == 0.0f) {
      for (int64_t i = 0; i < n; ++i) w[i] -= step * g[i];
    } else {
      for (int64_t i = 0; i < n; ++i) w[i] -= lr_ * (scale * g[i] + wd_ * w[i]);
    }
  }

 private:
  float lr_, wd_;
};

}  // namespace

void RegisterSgd(OptimizerRegistry& r) {
  std::vector<ParamDef> params = CommonOptimizerParams();
  r.Add({"sgd", "plain SGD: w -= lr (g + weight_decay w)", params}, {[](const AlgorithmSpec& spec) {
          return std::make_unique<Sgd>(OptimizerOptions::FromSpec(spec));
        }});
}

}  // namespace hetps
