#include <vector>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// FedAvg (McMahan et al. 2017) on bsp's rounds: each round, one server-optimizer step on the
// sample-weighted mean of the clients' deltas, sum_k n_k delta_k / sum_k n_k (with SGD and
// lr = 1, the model becomes the weighted mean of the clients' models). A push's weight is its
// sample count (Client::Push(..., weight)). Uploads arrive in worker-id order, so the sum is
// the same on every run.
class FedAvg final : public Aggregator {
 public:
  explicit FedAvg(const Optimizer& optimizer) : optimizer_(optimizer) {}

  bool rounds() const override { return true; }

  void Upload(PartitionState& part, const PushInfo& info, const float* delta) override {
    const int64_t n = part.info().length;
    if (sum_.empty()) sum_.assign(n, 0.0f);
    const float w = static_cast<float>(info.weight);
    for (int64_t i = 0; i < n; ++i) sum_[i] += w * delta[i];
    total_ += info.weight;
  }

  void EndRound(PartitionState& part, int64_t /*clock*/) override {
    if (!sum_.empty() && total_ > 0) {
      part.ApplyGradient(optimizer_, sum_.data(), static_cast<float>(1 / total_));
    }
    sum_.clear();
    total_ = 0;
  }

  // Only reached if a push is not held for a round (never under bsp): applied on its own.
  void OnPush(PartitionState& part, const PushInfo& /*info*/, const float* delta) override {
    part.ApplyGradient(optimizer_, delta, 1.0f);
  }

 private:
  const Optimizer& optimizer_;
  // The open round's weighted deltas; a round is handed over within one call (Upload each,
  // then EndRound), so nothing is kept between calls and a checkpoint needs no state.
  std::vector<float> sum_;
  double total_ = 0;
};

}  // namespace

// A round must be every client's update of one clock (bsp's), or the clients the scheduler
// kept for it (selected's).
void RegisterFedAvg(AggregatorRegistry& r) {
  r.Add({"fedavg",
         "each round (bsp's, or one the scheduler closes under selected) is one optimizer step on "
         "the sample-weighted mean of the clients' "
         "deltas (McMahan et al. 2017)",
         {}},
        {[](const AlgorithmSpec&, const Optimizer& optimizer) {
           return std::make_unique<FedAvg>(optimizer);
         },
         {ApplySchedule::kLockstepRounds, ApplySchedule::kScheduledRounds}});
}

}  // namespace hetps
