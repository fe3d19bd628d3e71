#include "hetps/layer_accumulator.h"

#include <algorithm>

#include "hetps/client.h"

namespace hetps {
namespace {

double SquaredNorm(const float* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * v[i];
  return s;
}

}  // namespace

LayerAccumulator::LayerAccumulator(std::vector<Tensor> tensors)
    : tensors_(std::move(tensors)), sums_(tensors_.size()) {
  for (const Tensor& t : tensors_) layers_[t.layer];
}

void LayerAccumulator::BeginStep(const LayerPeriods& schedule) {
  mean_ = schedule.mean;
  for (auto& [index, layer] : layers_) {
    if (layer.due) layer.counted = 0;  // pushed at the previous step
    ++layer.counted;
    layer.due = layer.counted >= schedule.Period(index);
    layer.grad_sq = layer.weight_sq = 0;
    layer.measured = false;
  }
}

bool LayerAccumulator::Due(size_t t) const { return layers_.at(tensors_[t].layer).due; }

int64_t LayerAccumulator::Steps(size_t t) const { return layers_.at(tensors_[t].layer).counted; }

void LayerAccumulator::Skip(size_t t) {
  Layer& layer = layers_.at(tensors_[t].layer);
  if (!layer.due)
    layer.deferred_bytes += tensors_[t].elements * static_cast<int64_t>(sizeof(float));
}

bool LayerAccumulator::Offer(size_t t, float* grad) {
  Layer& layer = layers_.at(tensors_[t].layer);
  std::vector<float>& sum = sums_[t];
  const int64_t n = tensors_[t].elements;
  if (!layer.due) {
    if (sum.empty()) sum.assign(n, 0.0f);
    for (int64_t i = 0; i < n; ++i) sum[i] += grad[i];
    Skip(t);
    return false;
  }
  if (!sum.empty()) {
    for (int64_t i = 0; i < n; ++i) grad[i] += sum[i];
    std::fill(sum.begin(), sum.end(), 0.0f);
  }
  if (mean_ && layer.counted > 1) {
    const float inv = 1.0f / static_cast<float>(layer.counted);
    for (int64_t i = 0; i < n; ++i) grad[i] *= inv;
  }
  return true;
}

void LayerAccumulator::Measure(size_t t, const float* grad, const float* weights) {
  const int64_t n = tensors_[t].elements;
  MeasureNorms(t, SquaredNorm(grad, n), weights != nullptr ? SquaredNorm(weights, n) : 0.0);
}

void LayerAccumulator::MeasureNorms(size_t t, double grad_norm_sq, double weight_norm_sq) {
  Layer& layer = layers_.at(tensors_[t].layer);
  layer.grad_sq += grad_norm_sq;
  layer.weight_sq += weight_norm_sq;
  layer.measured = true;
}

void LayerAccumulator::Report(Client& client) {
  for (auto& [index, layer] : layers_) {
    client.ReportLayer(index, layer.measured ? layer.grad_sq : -1,
                       layer.measured ? layer.weight_sq : -1, layer.deferred_bytes);
  }
}

int64_t LayerAccumulator::deferred_bytes() const {
  int64_t total = 0;
  for (const auto& [index, layer] : layers_) total += layer.deferred_bytes;
  return total;
}

int64_t LayerAccumulator::deferred_bytes(int32_t layer) const {
  auto it = layers_.find(layer);
  return it == layers_.end() ? 0 : it->second.deferred_bytes;
}

}  // namespace hetps
