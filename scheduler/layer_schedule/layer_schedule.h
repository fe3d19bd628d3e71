// Layer-wise push schedules (ALGORITHMS.md §5, carried to data-centre training): the scheduler
// gives each layer a push period P >= 1 and workers push the layer's gradient once every P of
// their steps, accumulating the gradients of the steps between (nothing is dropped: the push
// carries their sum, or with combine=mean their mean). The periods travel to the workers on
// every heartbeat reply (proto::LayerSchedule) and change live (`hetps ctl set
// layer_schedule=SPEC`). Chosen by a spec string (--layer_schedule=fixed:deep=4) from the
// registry below; a new policy is one file with its Register function, one line in
// layer_schedules.def, and its test.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"

namespace hetps {

// What a policy sees of one layer (index = position in the vector given to Periods).
struct LayerFigures {
  int64_t elements = 0;  // parameters of the layer (from the shard map)
  // The workers' relative gradient size, ||g|| / ||w|| of one step's gradient against the
  // layer's weights (EWMA over reports); < 0: not measured yet.
  double relative_gradient = -1;
};

// What a policy sees of the run: the furthest clock a worker reported (its steps, or a
// federated client's rounds), and the training loss the workers report now against the first
// they reported (EWMA over reports; 1 until known).
struct RunFigures {
  int64_t clock = 0;
  double loss_ratio = 1;
};

class LayerSchedulePolicy {
 public:
  virtual ~LayerSchedulePolicy() = default;
  // Each layer's push period (>= 1), one per entry of `layers`.
  virtual std::vector<int32_t> Periods(const std::vector<LayerFigures>& layers,
                                       const RunFigures& run) = 0;
  // What a push of accumulated gradients carries: their mean (true) or their sum.
  virtual bool mean() const { return false; }
};

struct LayerScheduleEntry {
  std::function<std::unique_ptr<LayerSchedulePolicy>(const AlgorithmSpec&)> make;
};
using LayerScheduleRegistry = Registry<LayerScheduleEntry>;

const LayerScheduleRegistry& LayerSchedules();
StatusOr<std::unique_ptr<LayerSchedulePolicy>> MakeLayerSchedule(const std::string& spec);

// The parameter every accumulating policy declares: combine=sum|mean.
ParamDef CombineParam();
bool CombinesMean(const AlgorithmSpec& spec);

}  // namespace hetps
