#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {

#define HETPS_LAYER_SCHEDULE(Name) void Register##Name(LayerScheduleRegistry& r);
#include "scheduler/layer_schedule/layer_schedules.def"
#undef HETPS_LAYER_SCHEDULE

const LayerScheduleRegistry& LayerSchedules() {
  static const LayerScheduleRegistry* r = [] {
    auto* r = new LayerScheduleRegistry("layer_schedule");
#define HETPS_LAYER_SCHEDULE(Name) Register##Name(*r);
#include "scheduler/layer_schedule/layer_schedules.def"
#undef HETPS_LAYER_SCHEDULE
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<LayerSchedulePolicy>> MakeLayerSchedule(const std::string& text) {
  auto spec = LayerSchedules().Parse(text);
  if (!spec.ok()) return spec.status();
  return LayerSchedules().EntryFor(spec->name()).make(*spec);
}

ParamDef CombineParam() {
  return ParamDef::Choice("combine", "sum", {"sum", "mean"},
                          "what a push of K accumulated gradients carries: their sum (the K "
                          "steps' worth) or their mean");
}

bool CombinesMean(const AlgorithmSpec& spec) { return spec.Text("combine") == "mean"; }

}  // namespace hetps
