// LayerPlanner: the scheduler's layer-wise push schedule (scheduler/layer_schedule/). It holds
// the chosen policy, the layers' shapes (from the shard map) and what the workers measure of
// each layer (their heartbeat reports: relative gradient size, bytes accumulated instead of
// pushed) and their training loss, recomputes the periods when asked, and renders them for the
// workers (the heartbeat reply's proto::LayerSchedule), /api/status and /metrics.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps.pb.h"
#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {

class Exposition;

class LayerPlanner {
 public:
  LayerPlanner();  // "every"
  // Switches to the policy of `spec` (validated; on error nothing changes).
  Status Set(const std::string& spec);
  // The spec in use, every parameter spelled out.
  const std::string& spec() const { return spec_; }
  // The layers of the declared tensors (their `layer` fields), with their sizes.
  void SetShape(const proto::ShardMap& map);
  void OnWorkerReport(int32_t worker, const proto::WorkerReport& report);
  // Recomputes the periods with the furthest clock a worker reported; true when they changed
  // (logged).
  bool Update(int64_t clock);
  // What a worker's heartbeat reply carries.
  const proto::LayerSchedule& Hint() const { return hint_; }
  nlohmann::json Json() const;
  void Metrics(Exposition& e) const;

 private:
  struct Layer {
    int64_t elements = 0;
    double relative_gradient = -1;  // EWMA over reports
  };
  std::unique_ptr<LayerSchedulePolicy> policy_;
  std::string spec_;
  std::vector<Layer> layers_;                               // by layer index
  std::map<int32_t, std::map<int32_t, int64_t>> deferred_;  // worker -> layer -> bytes
  proto::LayerSchedule hint_;
  int64_t clock_ = 0;                   // as of the last Update
  double first_loss_ = -1, loss_ = -1;  // the workers' reported training loss: first, EWMA
  int64_t DeferredBytes(int32_t layer) const;
};

}  // namespace hetps
