// Aggregator: *how* the pushes to one partition combine into its values (ALGORITHMS.md §3-4,
// §6), orthogonal to the consistency controller, which decides *when*. One instance per
// partition, driven only by the partition's owning thread. Chosen by --aggregator:
//   sum      every gradient through the server optimizer (under softsync, c of them per step,
//            averaged, each scaled by alpha0/sigma); --staleness_lr=inverse scales a
//            gradient of staleness sigma by 1/sigma (alpha0/sigma, §3); --delay_compensation=
//            dcasgd adds lambda * g*g*(w - w_pull) for the worker's last read w_pull (§6)
//   fedavg   with bsp: each round is one step on the sample-weighted mean of the workers'
//            deltas (the round does the weighting; a push outside rounds is summed)
//   temporal with bsp: per partition (so per layer) the average of every client's latest
//            uploaded model, weighted by samples * (e/2)^-(rounds since its upload); a
//            partition nobody uploaded in a round (a deep layer off its rounds) is unchanged
//   fedbuff  buffers K deltas weighted by (1+sigma)^-a, then one optimizer step on their mean
//   fedasync mixes x = (1 - alpha_t) x + alpha_t (x_base - delta), alpha_t = alpha * s(sigma)
// Staleness sigma = the partition's version now - the version the push was computed from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/optimizer/optimizer.h"

namespace hetps {

class PartitionState;

struct AggregatorOptions {
  std::string name = "sum";
  std::string staleness_lr = "none";        // sum: none | inverse
  std::string delay_compensation = "none";  // sum: none | dcasgd
  double dcasgd_lambda = 0.04;
  int fedbuff_k = 4;
  double staleness_exponent = 0.5;  // fedbuff, fedasync polynomial: a in (1+sigma)^-a
  double fedasync_alpha = 0.6;
  std::string fedasync_staleness = "polynomial";  // constant | polynomial | hinge
  double hinge_a = 4, hinge_b = 2;
};

struct PushInfo {
  int32_t worker = 0;
  int64_t clock = 0;
  int64_t base_version = 0;
  double weight = 1;
  int32_t layer = 0;
  int64_t window = 0;  // softsync: gradients per step (0: apply each push on its own)
};

class Aggregator {
 public:
  virtual ~Aggregator() = default;
  // Handles one push of info().length floats `g` (a gradient, or a model delta w_base - w_local).
  virtual void OnPush(PartitionState& part, const PushInfo& info, const float* g) = 0;
  // `worker` was just sent the partition's current values.
  virtual void OnPull(PartitionState& /*part*/, int32_t /*worker*/) {}
  // Applies whatever a consistency window left partially filled (on a policy switch).
  virtual void Flush(PartitionState& /*part*/) {}
  // Round-based aggregators (temporal): a closed round hands over each of its updates, then
  // ends. An aggregator that returns false from rounds() leaves rounds to RoundSpec's combine.
  virtual bool rounds() const { return false; }
  virtual void Upload(PartitionState& /*part*/, const PushInfo& /*info*/, const float* /*update*/) {
  }
  virtual void EndRound(PartitionState& /*part*/, int64_t /*clock*/) {}
};

// Checks the options once (at startup), so making per-partition instances cannot fail.
Status ValidateAggregator(const AggregatorOptions& options);
// REQUIRES: ValidateAggregator(options).ok(); `optimizer` outlives the aggregator.
std::unique_ptr<Aggregator> MakeAggregator(const AggregatorOptions& options,
                                           const Optimizer& optimizer);

// Staleness weights, each 1 at sigma = 0 and non-increasing.
double PolynomialStaleness(int64_t sigma, double a);       // (1 + sigma)^-a
double HingeStaleness(int64_t sigma, double a, double b);  // 1 if sigma <= b, else 1/(a(sigma-b)+1)

// One factory per aggregator, each in its own file.
std::unique_ptr<Aggregator> MakeSum(const AggregatorOptions& options, const Optimizer& optimizer);
std::unique_ptr<Aggregator> MakeFedBuff(const AggregatorOptions& options,
                                        const Optimizer& optimizer);
std::unique_ptr<Aggregator> MakeFedAsync(const AggregatorOptions& options);
std::unique_ptr<Aggregator> MakeTemporal();

// Temporal weights n_k * a^-(t - ts_k), a = e/2, normalized to sum to 1 (ALGORITHMS.md §5).
std::vector<double> TemporalWeights(const std::vector<double>& samples,
                                    const std::vector<int64_t>& timestamps, int64_t t);

}  // namespace hetps
