#include <map>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// FedAsync (Xie, Koyejo, Gupta 2019): on a client's update, x_t = (1 - alpha_t) x_{t-1} +
// alpha_t x_new with alpha_t = alpha * s(t - tau). The client sends its delta from the model it
// read (x_tau - x_local), so x_new = x_tau - delta, with x_tau kept from its last read (the
// current values if none). s: constant 1, polynomial (1 + sigma)^-a, or hinge.
class FedAsync final : public Aggregator {
 public:
  explicit FedAsync(const AggregatorOptions& o) : o_(o) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* delta) override {
    const int64_t sigma = part.version() - info.base_version;
    const float alpha = static_cast<float>(o_.fedasync_alpha * Weight(sigma));
    auto base = bases_.find(info.worker);
    const float* x_tau = base != bases_.end() ? base->second->data() : part.values();
    const int64_t n = part.info().length;
    mixed_.resize(n);
    const float* x = part.values();
    for (int64_t i = 0; i < n; ++i) {
      const float x_new = x_tau[i] - delta[i];
      mixed_[i] = (1 - alpha) * x[i] + alpha * x_new;
    }
    part.SetValues(mixed_.data());
  }

  void OnPull(PartitionState& part, int32_t worker) override { bases_[worker] = part.Snapshot(); }

 private:
  double Weight(int64_t sigma) const {
    if (o_.fedasync_staleness == "constant") return 1.0;
    if (o_.fedasync_staleness == "hinge") return HingeStaleness(sigma, o_.hinge_a, o_.hinge_b);
    return PolynomialStaleness(sigma, o_.staleness_exponent);
  }

  AggregatorOptions o_;
  std::map<int32_t, std::shared_ptr<const std::vector<float>>> bases_;
  std::vector<float> mixed_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeFedAsync(const AggregatorOptions& options) {
  return std::make_unique<FedAsync>(options);
}

}  // namespace hetps
