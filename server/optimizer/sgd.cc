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
    const float step = lr_ * scale, lr = lr_, wd = wd_;
    if (wd == 0.0f) {
      RunVectorized([=] {
        for (int64_t i = 0; i < n; ++i) w[i] -= step * g[i];
      });
    } else {
      RunVectorized([=] {
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * (scale * g[i] + wd * w[i]);
      });
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
