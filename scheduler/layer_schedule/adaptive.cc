#include <algorithm>
#include <cmath>

#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {
namespace {

// Periods from what the workers measure: a layer whose one-step gradient is small against its
// weights (relative gradient r_l = ||g_l|| / ||w_l||) moves slowly, so its pushes can wait
// until its accumulated update is about as large, relative to its weights, as the fastest
// layer's single step: P_l = 2^floor(log2(r_max / r_l)), clamped to [min, max]. Powers of two
// keep a period from flickering between neighbours as the estimates move; a layer not measured
// yet is pushed every `min` steps.
class AdaptiveSchedule final : public LayerSchedulePolicy {
 public:
  AdaptiveSchedule(int32_t min, int32_t max, bool mean) : min_(min), max_(max), mean_(mean) {}

  std::vector<int32_t> Periods(const std::vector<LayerFigures>& layers) override {
    double r_max = 0;
    for (const LayerFigures& l : layers) r_max = std::max(r_max, l.relative_gradient);
    std::vector<int32_t> periods(layers.size(), min_);
    if (r_max <= 0) return periods;
    for (size_t i = 0; i < layers.size(); ++i) {
      const double r = layers[i].relative_gradient;
      if (r < 0) continue;
      const double ratio = r > 0 ? r_max / r : static_cast<double>(max_);
      const double p = std::exp2(std::floor(std::log2(std::max(ratio, 1.0))));
      periods[i] =
          static_cast<int32_t>(std::clamp(p, static_cast<double>(min_), static_cast<double>(max_)));
    }
    return periods;
  }
  bool mean() const override { return mean_; }

 private:
  int32_t min_, max_;
  bool mean_;
};

}  // namespace

void RegisterAdaptiveSchedule(LayerScheduleRegistry& r) {
  r.Add({"adaptive",
         "each layer's period from its relative gradient size ||g||/||w|| against the fastest "
         "layer's: 2^floor(log2(r_max/r)) steps, within [min, max]",
         {ParamDef::Int("min", "1", 1, 1024, "the shortest period in steps"),
          ParamDef::Int("max", "8", 1, 1024, "the longest period in steps"), CombineParam()}},
        {[](const AlgorithmSpec& spec) {
          const auto lo = static_cast<int32_t>(spec.Number("min"));
          const auto hi = static_cast<int32_t>(spec.Number("max"));
          return std::make_unique<AdaptiveSchedule>(lo, std::max(lo, hi), CombinesMean(spec));
        }});
}

}  // namespace hetps
