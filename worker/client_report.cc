#include "worker/client_report.h"

#include <algorithm>

namespace hetps {
namespace {

double MillisBetween(ClientReport::Steady::time_point a, ClientReport::Steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void RaiseTo(std::atomic<int64_t>& max, int64_t v) {
  int64_t seen = max.load(std::memory_order_relaxed);
  while (v > seen && !max.compare_exchange_weak(seen, v)) {
  }
}

}  // namespace

void ClientReport::OnPushed(int64_t sent_bytes, int64_t raw_bytes) {
  bytes_pushed_ += sent_bytes;
  raw_bytes_pushed_ += raw_bytes;
}

void ClientReport::OnPushAcked(int64_t staleness) {
  ++pushes_acked_;
  push_staleness_sum_ += staleness;
  const size_t bucket =
      static_cast<size_t>(std::clamp<int64_t>(staleness, 0, kStalenessBuckets - 1));
  if (staleness_counts_.size() <= bucket) staleness_counts_.resize(bucket + 1, 0);
  ++staleness_counts_[bucket];
  RaiseTo(max_push_staleness_, staleness);
}

void ClientReport::OnRead(int64_t bytes, int64_t staleness) {
  bytes_pulled_ += bytes;
  ++reads_;
  staleness_sum_ += staleness;
  RaiseTo(max_staleness_, staleness);
}

void ClientReport::StartIterations() {
  std::lock_guard<std::mutex> lock(mu_);
  iteration_start_ = Steady::now();
}

void ClientReport::BeginIteration() {
  std::lock_guard<std::mutex> lock(mu_);
  explicit_begin_ = true;
  in_iteration_ = true;
  iteration_start_ = Steady::now();
}

ClientReport::Steady::time_point ClientReport::EnterClock() {
  const Steady::time_point now = Steady::now();
  std::lock_guard<std::mutex> lock(mu_);
  iteration_ms_.push_back(MillisBetween(iteration_start_, now));
  in_iteration_ = false;
  return now;
}

void ClientReport::LeaveClock(Steady::time_point entered) {
  const Steady::time_point now = Steady::now();
  std::lock_guard<std::mutex> lock(mu_);
  wait_ms_.push_back(MillisBetween(entered, now));
  iteration_start_ = now;
  in_iteration_ = !explicit_begin_;
}

void ClientReport::AddMetrics(int64_t clock, const std::map<std::string, double>& metrics) {
  proto::MetricPoint p;
  p.set_clock(clock);
  p.mutable_values()->insert(metrics.begin(), metrics.end());
  std::lock_guard<std::mutex> lock(mu_);
  if (metrics_.size() >= kMetricPoints) {  // a trainer reporting faster than heartbeats
    metrics_.erase(metrics_.begin() + 1);  // the first and the newest stay
  }
  metrics_.push_back(std::move(p));
}

void ClientReport::Fill(int64_t clock, proto::WorkerReport& r) {
  r.set_clock(clock);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (double ms : iteration_ms_) r.add_iteration_ms(ms);
    for (double ms : wait_ms_) r.add_wait_ms(ms);
    iteration_ms_.clear();
    wait_ms_.clear();
    r.set_busy_ms(in_iteration_ ? MillisBetween(iteration_start_, Steady::now()) : 0.0);
    for (proto::MetricPoint& p : metrics_) *r.add_metrics() = std::move(p);
    metrics_.clear();
    r.set_device(device_);
    for (auto& [layer, g] : layers_) {
      *r.add_layers() = g;
      g.set_steps(0);
      g.set_grad_norm_sq(0);
    }
  }
  for (int64_t n : staleness_counts_) r.add_staleness_counts(n);
  staleness_counts_.clear();
  r.set_bytes_pushed(bytes_pushed_.load());
  r.set_raw_bytes_pushed(raw_bytes_pushed_.load());
  r.set_bytes_pulled(bytes_pulled_.load());
  r.set_co_located_bytes(shared_memory_bytes_.load());
}

void ClientReport::OnLayer(int32_t layer, double grad_norm_sq, double weight_norm_sq,
                           int64_t deferred_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  proto::LayerGradient& g = layers_[layer];
  g.set_layer(layer);
  g.set_deferred_bytes(deferred_bytes);
  if (grad_norm_sq < 0 || weight_norm_sq < 0) return;
  g.set_steps(g.steps() + 1);
  g.set_grad_norm_sq(g.grad_norm_sq() + grad_norm_sq);
  g.set_weight_norm_sq(weight_norm_sq);
}

void ClientReport::SetLayerSchedule(const proto::LayerSchedule& schedule) {
  std::lock_guard<std::mutex> lock(mu_);
  if (schedule_.spec == schedule.spec() && schedule_.mean == schedule.mean() &&
      std::ranges::equal(schedule_.periods, schedule.periods())) {
    return;
  }
  schedule_.spec = schedule.spec();
  schedule_.periods.assign(schedule.periods().begin(), schedule.periods().end());
  schedule_.mean = schedule.mean();
}

void ClientReport::SetDevice(const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  device_ = device;
}

LayerPeriods ClientReport::LayerSchedule() const {
  std::lock_guard<std::mutex> lock(mu_);
  return schedule_;
}

ClientStats ClientReport::Stats() const {
  ClientStats s;
  s.bytes_pushed = bytes_pushed_.load();
  s.raw_bytes_pushed = raw_bytes_pushed_.load();
  s.bytes_pulled = bytes_pulled_.load();
  s.requests = requests_.load();
  s.messages = messages_.load();
  s.shared_memory_bytes = shared_memory_bytes_.load();
  s.reads = reads_.load();
  s.max_staleness = max_staleness_.load();
  s.staleness_sum = staleness_sum_.load();
  s.dropped_pushes = dropped_pushes_.load();
  s.pushes = pushes_acked_.load();
  s.push_staleness_sum = push_staleness_sum_.load();
  s.max_push_staleness = max_push_staleness_.load();
  return s;
}

}  // namespace hetps
