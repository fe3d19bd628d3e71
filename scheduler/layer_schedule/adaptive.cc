#include <algorithm>
#include <cmath>

#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {
namespace {

// Periods from what the workers measure: a layer whose one-step gradient is small against its
// weights (relative gradient r_l = ||g_l|| / ||w_l||) moves slowly, so its pushes can wait
// until its accumulated update is about as large, relative to its weights, as the fastest
// layer's single step: P_l = 2^floor(log2(r_max / r_l)), clamped to [min, max].
//  - Warm-up: every layer every `min` steps until a worker's clock reaches `warmup` and the
//    workers' training loss has fallen by `loss_drop` from the first they reported: on a
//    network's initial plateau the gradients say little about the layers' pace, and deferring
//    a layer there (measured: the CNN's first convolution) can keep it from leaving it.
//  - Hysteresis: a layer's period doubles only once r_max / r_l is 25% past the next power of
//    two, and halves only once it is 20% below the current one, so estimates moving around a
//    boundary do not flip it back and forth.
// A layer not measured yet is pushed every `min` steps.
class AdaptiveSchedule final : public LayerSchedulePolicy {
 public:
  AdaptiveSchedule(int32_t min, int32_t max, int64_t warmup, double loss_drop, bool mean)
      : min_(min), max_(max), warmup_(warmup), loss_drop_(loss_drop), mean_(mean) {}

  std::vector<int32_t> Periods(const std::vector<LayerFigures>& layers,
                               const RunFigures& run) override {
    current_.resize(layers.size(), min_);
    double r_max = 0;
    for (const LayerFigures& l : layers) r_max = std::max(r_max, l.relative_gradient);
    warm_ = warm_ || (run.clock >= warmup_ && run.loss_ratio <= 1 - loss_drop_);
    if (!warm_ || r_max <= 0) return std::vector<int32_t>(layers.size(), min_);
    for (size_t i = 0; i < layers.size(); ++i) {
      const double r = layers[i].relative_gradient;
      current_[i] = r < 0 ? min_ : Next(current_[i], r > 0 ? r_max / r : 2.0 * max_);
    }
    return current_;
  }
  bool mean() const override { return mean_; }

 private:
  int32_t Next(int32_t period, double ratio) const {
    const double lo = min_, hi = max_;
    const double target =
        std::clamp(std::exp2(std::floor(std::log2(std::max(ratio, 1.0)))), lo, hi);
    if (target > period && ratio < 1.25 * target) return period;  // not clearly past it yet
    if (target < period && ratio >= 0.8 * period) return period;  // not clearly below it yet
    return static_cast<int32_t>(target);
  }

  int32_t min_, max_;
  int64_t warmup_;
  double loss_drop_;
  bool mean_;
  bool warm_ = false;             // the warm-up is over (for good)
  std::vector<int32_t> current_;  // the periods given last
};

}  // namespace

void RegisterAdaptiveSchedule(LayerScheduleRegistry& r) {
  r.Add({"adaptive",
         "each layer's period from its relative gradient size ||g||/||w|| against the fastest "
         "layer's: 2^floor(log2(r_max/r)) steps within [min, max], after a warm-up, with "
         "hysteresis",
         {ParamDef::Int("min", "1", 1, 1024, "the shortest period in steps"),
          ParamDef::Int("max", "8", 1, 1024, "the longest period in steps"),
          ParamDef::Int("warmup", "100", 0, 1e9,
                        "every layer every `min` steps until a worker's clock reaches this ..."),
          ParamDef::Real("loss_drop", "0.1", 0, 1,
                         "... and the training loss fell by this fraction of its first value"),
          CombineParam()}},
        {[](const AlgorithmSpec& spec) {
          const auto lo = static_cast<int32_t>(spec.Number("min"));
          const auto hi = static_cast<int32_t>(spec.Number("max"));
          return std::make_unique<AdaptiveSchedule>(lo, std::max(lo, hi), spec.Int("warmup"),
                                                    spec.Number("loss_drop"), CombinesMean(spec));
        }});
}

}  // namespace hetps
