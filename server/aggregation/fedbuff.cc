#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// FedBuff (Nguyen et al., AISTATS'22): B += s(sigma) * delta for each arriving client delta;
// at the K-th, one server-optimizer step on B / K (with SGD and lr = eta_g: w -= eta_g * B / K),
// then the buffer starts over. s(sigma) = (1 + sigma)^-a (FLSim's polynomial weight).
class FedBuff final : public Aggregator {
 public:
  FedBuff(const AggregatorOptions& o, const Optimizer& optimizer)
      : optimizer_(optimizer), k_(o.fedbuff_k), a_(o.staleness_exponent) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* delta) override {
    const int64_t n = part.info().length;
    if (buffer_.empty()) buffer_.assign(n, 0.0f);
    const float s = static_cast<float>(PolynomialStaleness(part.version() - info.base_version, a_));
    for (int64_t i = 0; i < n; ++i) buffer_[i] += s * delta[i];
    if (++count_ < k_) return;
    part.ApplyGradient(optimizer_, buffer_.data(), 1.0f / static_cast<float>(k_));
    buffer_.clear();
    count_ = 0;
  }

 private:
  const Optimizer& optimizer_;
  int k_;
  double a_;
  std::vector<float> buffer_;
  int count_ = 0;
};

}  // namespace

std::unique_ptr<Aggregator> MakeFedBuff(const AggregatorOptions& options,
                                        const Optimizer& optimizer) {
  return std::make_unique<FedBuff>(options, optimizer);
}

}  // namespace hetps
