#include <random>
#include <vector>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// DP-FedAvg's server side (McMahan et al., ICLR'18; --dp=central, common/privacy.h): each
// round, one server-optimizer step on (the sum of the clients' clipped deltas + Gaussian noise
// of standard deviation noise x clip per coordinate) / the number of deltas. The deltas are
// summed unweighted (a weight could carry a client's data size into the sum); the clients clip
// their whole update to `clip`, so the noise, drawn independently per coordinate on every
// partition, is the Gaussian mechanism's on the whole model. The noise is drawn from (seed,
// partition id, version), so that a run repeats exactly. Under adaptive clipping the round's
// close names the noise's std (the round's clip times the update noise multiplier), which
// replaces the spec's.
class DpFedAvg final : public Aggregator {
 public:
  DpFedAvg(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : optimizer_(optimizer),
        std_(spec.Number("noise") * spec.Number("clip")),
        seed_(static_cast<uint64_t>(spec.Int("seed"))) {}

  bool rounds() const override { return true; }

  void Upload(PartitionState& part, const PushInfo&, const float* delta) override {
    const int64_t n = part.info().length;
    if (sum_.empty()) sum_.assign(n, 0.0);
    for (int64_t i = 0; i < n; ++i) sum_[i] += delta[i];
    ++count_;
  }

  void EndRound(PartitionState& part, int64_t) override {
    if (count_ > 0) {
      std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(part.info().id) * 7919 +
                          static_cast<uint64_t>(part.version()));
      const double std = part.round_noise_std() >= 0 ? part.round_noise_std() : std_;
      std::normal_distribution<double> noise(0.0, std);
      std::vector<float> mean(sum_.size());
      for (size_t i = 0; i < sum_.size(); ++i) {
        mean[i] = static_cast<float>((sum_[i] + noise(rng)) / static_cast<double>(count_));
      }
      part.ApplyGradient(optimizer_, mean.data(), 1.0f);
    }
    sum_.clear();
    count_ = 0;
  }

  // Not reached under rounds (the only schedules it is defined for).
  void OnPush(PartitionState& part, const PushInfo&, const float* delta) override {
    part.ApplyGradient(optimizer_, delta, 1.0f);
  }

 private:
  const Optimizer& optimizer_;
  double std_;
  uint64_t seed_;
  // The open round's sum; a round is handed over within one call, so a checkpoint needs none.
  std::vector<double> sum_;
  int64_t count_ = 0;
};

}  // namespace

void RegisterDpFedAvg(AggregatorRegistry& r) {
  r.Add({"dp_fedavg",
         "each round, one step on the unweighted mean of the clients' clipped deltas with "
         "Gaussian noise of std noise x clip added to their sum (DP-FedAvg, McMahan et al. "
         "ICLR'18; hetps fed --dp=central sets it)",
         {ParamDef::Real("clip", "1", 0, 1e12, "the clients' clip norm (--dp's)", true),
          ParamDef::Real("noise", "1", 0, 1e6, "noise std / clip (--dp's)"),
          ParamDef::Int("seed", "1", 0, 1e15, "seed of the noise")}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<DpFedAvg>(spec, optimizer);
         },
         {ApplySchedule::kLockstepRounds, ApplySchedule::kScheduledRounds}});
}

}  // namespace hetps
