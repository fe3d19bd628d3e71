// The layer-wise push schedule on a worker (docs/algorithms.md, "Layer schedules"): the
// scheduler gives each layer a push period P (LayerPeriods, Client::layer_schedule()); a layer
// is pushed once every P of the worker's steps and its gradients of the steps between are
// accumulated here, not dropped, so the push delivers their sum (or, with `mean`, their mean).
// A period that shrinks takes effect at once: a layer whose accumulated steps reach its new
// period is pushed at this step.
//
//   LayerAccumulator acc({{layer_of_t0, n0}, {layer_of_t1, n1}, ...});
//   every step: acc.BeginStep(client.layer_schedule());
//               for each tensor t: acc.Measure(t, grad_t, weights_t);   // optional
//                                  if (acc.Offer(t, grad_t)) push grad_t (now the sum);
//               acc.Report(client);  // what the adaptive schedule reads, bytes saved
//
// Part of hetps's public API (installed as <hetps/layer_accumulator.h>).
// Thread-safety: none; one trainer thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hetps {

class Client;

// The push periods per layer index (absent: 1), and what a push of K accumulated gradients
// carries: their mean (true) or their sum.
struct LayerPeriods {
  std::string spec = "every";
  std::vector<int32_t> periods;
  bool mean = false;
  int32_t Period(int32_t layer) const {
    if (layer < 0 || layer >= static_cast<int32_t>(periods.size())) return 1;
    return periods[layer] < 1 ? 1 : periods[layer];
  }
};

class LayerAccumulator {
 public:
  struct Tensor {
    int32_t layer = 0;
    int64_t elements = 0;
  };
  explicit LayerAccumulator(std::vector<Tensor> tensors);

  // Starts a step: every layer counts it; a layer whose counted steps reach its period is due.
  void BeginStep(const LayerPeriods& schedule);
  // Whether tensor t's layer is pushed at this step.
  bool Due(size_t t) const;
  // Steps tensor t's push would carry if pushed now (this one included).
  int64_t Steps(size_t t) const;
  // Host gradients: not due, `grad` (elements() floats) is added to t's accumulator and false
  // is returned; due, the accumulated gradients are added into `grad` (divided by their count
  // with `mean`), the accumulator is cleared and true is returned: push `grad`.
  bool Offer(size_t t, float* grad);
  // Marks tensor t handled without a host gradient (the caller accumulated elsewhere, e.g. on
  // a device): counts its deferred bytes when it was not due.
  void Skip(size_t t);
  // One step's squared norms of tensor t's gradient and weights (before Offer changes `grad`).
  void Measure(size_t t, const float* grad, const float* weights);
  void MeasureNorms(size_t t, double grad_norm_sq, double weight_norm_sq);
  // Sends each measured layer's figures of this step to the scheduler (Client::ReportLayer).
  void Report(Client& client);

  int64_t deferred_bytes() const;  // raw bytes accumulated instead of pushed, all layers
  int64_t deferred_bytes(int32_t layer) const;
  int64_t elements(size_t t) const { return tensors_[t].elements; }
  size_t size() const { return tensors_.size(); }  // tensors

 private:
  struct Layer {
    int64_t counted = 0;  // steps since its last push, this one included
    bool due = true;
    double grad_sq = 0, weight_sq = 0;  // this step's, summed over its tensors
    bool measured = false;
    int64_t deferred_bytes = 0;
  };
  std::vector<Tensor> tensors_;
  std::vector<std::vector<float>> sums_;  // per tensor; empty until first accumulated
  std::map<int32_t, Layer> layers_;
  bool mean_ = false;
};

}  // namespace hetps
