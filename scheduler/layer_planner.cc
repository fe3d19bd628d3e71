#include "scheduler/layer_planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "scheduler/prometheus.h"

namespace hetps {
namespace {

constexpr double kEwma = 0.2;  // weight of a new report in a layer's relative gradient

}  // namespace

LayerPlanner::LayerPlanner() {
  Status s = Set("every");
  (void)s;  // "every" takes no parameters: it always parses
}

Status LayerPlanner::Set(const std::string& text) {
  auto spec = LayerSchedules().Parse(text);
  if (!spec.ok()) return spec.status();
  policy_ = LayerSchedules().EntryFor(spec->name()).make(*spec);
  spec_ = spec->Full();
  hint_.set_spec(spec_);
  Update(clock_);
  return Status();
}

void LayerPlanner::SetShape(const proto::ShardMap& map) {
  int32_t count = 0;
  for (const proto::TensorSpec& t : map.tensors()) count = std::max(count, t.layer() + 1);
  layers_.assign(count, Layer{});
  for (const proto::TensorSpec& t : map.tensors()) {
    if (t.layer() < 0) continue;
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    layers_[t.layer()].elements += n;
  }
  Update(clock_);
}

void LayerPlanner::OnWorkerReport(int32_t worker, const proto::WorkerReport& report) {
  for (const proto::MetricPoint& p : report.metrics()) {
    auto it = p.values().find("loss");
    if (it == p.values().end() || !std::isfinite(it->second) || it->second <= 0) continue;
    if (first_loss_ < 0) first_loss_ = it->second;
    loss_ = loss_ < 0 ? it->second : (1 - kEwma) * loss_ + kEwma * it->second;
  }
  for (const proto::LayerGradient& g : report.layers()) {
    if (g.layer() < 0 || g.layer() >= static_cast<int32_t>(layers_.size())) continue;
    deferred_[worker][g.layer()] = std::max<int64_t>(g.deferred_bytes(), 0);
    if (g.steps() <= 0 || !(g.weight_norm_sq() > 0) || !(g.grad_norm_sq() >= 0)) continue;
    const double r = std::sqrt(g.grad_norm_sq() / static_cast<double>(g.steps())) /
                     std::sqrt(g.weight_norm_sq());
    if (!std::isfinite(r)) continue;
    double& ewma = layers_[g.layer()].relative_gradient;
    ewma = ewma < 0 ? r : (1 - kEwma) * ewma + kEwma * r;
  }
}

bool LayerPlanner::Update(int64_t clock) {
  clock_ = std::max(clock_, clock);
  std::vector<LayerFigures> figures;
  for (const Layer& l : layers_) figures.push_back({l.elements, l.relative_gradient});
  const double loss_ratio = first_loss_ > 0 && loss_ > 0 ? loss_ / first_loss_ : 1.0;
  std::vector<int32_t> periods =
      policy_->Periods(figures, {.clock = clock_, .loss_ratio = loss_ratio});
  const bool mean = policy_->mean();
  if (std::ranges::equal(periods, hint_.periods()) && mean == hint_.mean()) return false;
  hint_.mutable_periods()->Assign(periods.begin(), periods.end());
  hint_.set_mean(mean);
  if (!periods.empty()) {
    spdlog::info("layer schedule {}: push periods per layer {}", spec_, periods);
  }
  return true;
}

int64_t LayerPlanner::DeferredBytes(int32_t layer) const {
  int64_t total = 0;
  for (const auto& [worker, layers] : deferred_) {
    auto it = layers.find(layer);
    if (it != layers.end()) total += it->second;
  }
  return total;
}

nlohmann::json LayerPlanner::Json() const {
  nlohmann::json layers = nlohmann::json::array();
  int64_t deferred = 0;
  for (int32_t l = 0; l < static_cast<int32_t>(layers_.size()); ++l) {
    const int64_t bytes = DeferredBytes(l);
    deferred += bytes;
    layers.push_back({{"layer", l},
                      {"elements", layers_[l].elements},
                      {"period", l < hint_.periods_size() ? hint_.periods(l) : 1},
                      {"relative_gradient", layers_[l].relative_gradient},
                      {"deferred_bytes", bytes}});
  }
  return {{"spec", spec_},
          {"combine", hint_.mean() ? "mean" : "sum"},
          {"deferred_bytes", deferred},
          {"layers", std::move(layers)}};
}

void LayerPlanner::Metrics(Exposition& e) const {
  const auto n = static_cast<int32_t>(layers_.size());
  e.Family("hetps_layer_push_period", "gauge",
           "Steps between pushes of the layer (the layer-wise schedule).");
  for (int32_t l = 0; l < n; ++l) {
    e.Sample("hetps_layer_push_period", fmt::format("layer=\"{}\"", l),
             l < hint_.periods_size() ? hint_.periods(l) : 1);
  }
  e.Family("hetps_layer_deferred_bytes_total", "counter",
           "Raw gradient bytes workers accumulated instead of pushing (saved by the schedule).");
  for (int32_t l = 0; l < n; ++l) {
    e.Sample("hetps_layer_deferred_bytes_total", fmt::format("layer=\"{}\"", l), DeferredBytes(l));
  }
  e.Family("hetps_layer_relative_gradient", "gauge",
           "Workers' one-step gradient norm over the layer's weight norm (EWMA; -1: unmeasured).");
  for (int32_t l = 0; l < n; ++l) {
    e.Sample("hetps_layer_relative_gradient", fmt::format("layer=\"{}\"", l),
             layers_[l].relative_gradient);
  }
}

}  // namespace hetps
