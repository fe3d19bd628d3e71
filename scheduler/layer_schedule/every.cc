#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {
namespace {

// Every layer every step: nothing is accumulated (the default).
class EverySchedule final : public LayerSchedulePolicy {
 public:
  std::vector<int32_t> Periods(const std::vector<LayerFigures>& layers,
                               const RunFigures&) override {
    return std::vector<int32_t>(layers.size(), 1);
  }
};

}  // namespace

void RegisterEverySchedule(LayerScheduleRegistry& r) {
  r.Add({"every", "every layer is pushed every step", {}},
        {[](const AlgorithmSpec&) { return std::make_unique<EverySchedule>(); }});
}

}  // namespace hetps
