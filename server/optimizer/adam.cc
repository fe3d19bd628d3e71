#include <cmath>
#include <tuple>

#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// Adam (Kingma & Ba) with bias correction; `step` is the partition's update count.
class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerOptions& o) : o_(o) {}
  int num_slots() const override { return 2; }
  void Apply(float* w, const float* g, int64_t n, float* const* slots, int64_t step,
             float scale) const override {
    Update(w, g, n, slots[0], slots[1], step, scale);
  }
  // Lazy Adam: m and v of the pushed rows only, bias-corrected with the row's own step (how
  // many pushes touched it; kept after m and v), not a global one.
  int64_t RowStateFloats(int64_t dim) const override { return 2 * dim + 1; }
  void ApplyRow(float* w, const float* g, int64_t dim, float* state, float scale) const override {
    float& steps = state[2 * dim];
    steps += 1;
    Update(w, g, dim, state, state + dim, static_cast<int64_t>(steps), scale);
  }

 private:
  void Update(float* w, const float* g, int64_t n, float* m, float* v, int64_t step,
              float scale) const {
    const float b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
    const double t = static_cast<double>(step);
    const float alpha = static_cast<float>(o_.lr * std::sqrt(1 - std::pow(o_.beta2, t)) /
                                           (1 - std::pow(o_.beta1, t)));
    const float eps = static_cast<float>(o_.epsilon), wd = static_cast<float>(o_.weight_decay);
    RunVectorized([=] {
      for (int64_t i = 0; i < n; ++i) {
        const float gi = scale * g[i] + wd * w[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
      }
    });
  }

  OptimizerOptions o_;
};

}  // namespace

void RegisterAdam(OptimizerRegistry& r) {
  std::vector<ParamDef> params = CommonOptimizerParams();
  // A beta of 1 would divide by zero in the bias correction.
  for (auto [name, def, help] : {std::tuple{"beta1", "0.9", "first-moment decay"},
                                 std::tuple{"beta2", "0.999", "second-moment decay"}}) {
    params.push_back(ParamDef::Real(name, def, 0, 1, help));
    params.back().max_open = true;
  }
  params.push_back(ParamDef::Real("epsilon", "1e-8", 0, 1, "denominator guard"));
  r.Add({"adam", "Adam with bias correction (Kingma and Ba); on tables lazy, with a step per row",
         params},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<Adam>(OptimizerOptions::FromSpec(spec));
        }});
}

}  // namespace hetps
