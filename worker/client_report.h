// ClientReport: what a worker's client measures about itself, for two readers: the user
// (Client::stats()) and the scheduler (the WorkerReport riding on each heartbeat). Iteration
// timing (time outside Clock(), time blocked in it), push and read staleness, bytes, the
// trainer's figures and device; and the layer-wise schedule's exchange, which rides on the same
// heartbeats: the per-layer figures going up, the periods coming back on the replies.
//
// Thread-safety: the counters are atomics; timing and metrics are guarded by a mutex (written
// by the threads calling Clock(), BeginIteration() and ReportMetrics(), read by the I/O
// thread); the staleness histogram is touched by the I/O thread only (OnPushAcked, Fill).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "hetps.pb.h"
#include "hetps/client.h"

namespace hetps {

class ClientReport {
 public:
  // Push staleness is reported exactly up to this many versions; the last bucket the rest.
  static constexpr int64_t kStalenessBuckets = 33;
  // Trainer figures held for one heartbeat at most.
  static constexpr size_t kMetricPoints = 64;

  // Data path.
  void OnPushed(int64_t sent_bytes, int64_t raw_bytes);
  void OnRequest() { ++requests_; }
  void OnMessage() { ++messages_; }
  void OnSharedMemory(int64_t bytes) { shared_memory_bytes_ += bytes; }
  void OnPushAcked(int64_t staleness);  // I/O thread
  void OnDropped() { ++dropped_pushes_; }
  void OnRead(int64_t bytes, int64_t staleness);

  // Iterations: the time outside Clock() is the iteration's; the time inside it is the gate's.
  void StartIterations();  // the first iteration starts now (once the tensors are declared)
  void BeginIteration();   // the trainer marks its iterations (evaluation is then not counted)
  using Steady = std::chrono::steady_clock;
  Steady::time_point EnterClock();
  void LeaveClock(Steady::time_point entered);
  void AddMetrics(int64_t clock, const std::map<std::string, double>& metrics);
  // The layer-wise schedule's exchange: what the trainer measured of a layer (Client::
  // ReportLayer; norms < 0: not measured), and the periods from the scheduler's heartbeat
  // replies (I/O thread) that Client::layer_schedule() reads.
  void OnLayer(int32_t layer, double grad_norm_sq, double weight_norm_sq, int64_t deferred_bytes);
  void SetLayerSchedule(const proto::LayerSchedule& schedule);
  LayerPeriods LayerSchedule() const;
  void SetDevice(const std::string& device);

  // The heartbeat's report (since the last one; byte counts are totals). I/O thread.
  void Fill(int64_t clock, proto::WorkerReport& report);
  ClientStats Stats() const;

 private:
  std::atomic<int64_t> bytes_pushed_{0}, raw_bytes_pushed_{0}, bytes_pulled_{0}, requests_{0},
      messages_{0};
  std::atomic<int64_t> reads_{0}, staleness_sum_{0}, max_staleness_{0}, dropped_pushes_{0};
  std::atomic<int64_t> pushes_acked_{0}, push_staleness_sum_{0}, max_push_staleness_{0};
  std::atomic<int64_t> shared_memory_bytes_{0};
  std::vector<int64_t> staleness_counts_;  // I/O thread

  mutable std::mutex mu_;
  std::vector<double> iteration_ms_, wait_ms_;  // since the last report
  Steady::time_point iteration_start_ = Steady::now();
  bool in_iteration_ = true;     // false inside Clock() and, with BeginIteration(), after it
  bool explicit_begin_ = false;  // the trainer marks its iterations with BeginIteration()
  std::vector<proto::MetricPoint> metrics_;         // since the last report, at most kMetricPoints
  std::map<int32_t, proto::LayerGradient> layers_;  // steps and norms since the last report
  LayerPeriods schedule_;
  std::string device_;
};

}  // namespace hetps
