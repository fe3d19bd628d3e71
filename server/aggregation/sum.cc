#include <map>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// Every gradient through the server optimizer, optionally scaled by 1/sigma (Zhang et al.,
// IJCAI'16: alpha0/sigma, alpha0 at sigma = 0) and delay-compensated (DC-ASGD, Zheng et al.,
// ICML'17: g + lambda * g*g*(w - w_bak[m]), w_bak[m] = the values worker m last read).
class Sum final : public Aggregator {
 public:
  Sum(const AggregatorOptions& o, const Optimizer& optimizer)
      : optimizer_(optimizer),
        inverse_(o.staleness_lr == "inverse"),
        dcasgd_(o.delay_compensation == "dcasgd"),
        lambda_(static_cast<float>(o.dcasgd_lambda)) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* g) override {
    const int64_t sigma = part.version() - info.base_version;
    const float scale = inverse_ && sigma > 0 ? 1.0f / static_cast<float>(sigma) : 1.0f;
    auto bak = dcasgd_ ? backups_.find(info.worker) : backups_.end();
    if (bak == backups_.end()) {
      part.ApplyGradient(optimizer_, g, scale);
      return;
    }
    const int64_t n = part.info().length;
    compensated_.resize(n);
    const float* w = part.values();
    const float* w_bak = bak->second->data();
    for (int64_t i = 0; i < n; ++i)
      compensated_[i] = g[i] + lambda_ * g[i] * g[i] * (w[i] - w_bak[i]);
    part.ApplyGradient(optimizer_, compensated_.data(), scale);
  }

  void OnPull(PartitionState& part, int32_t worker) override {
    if (dcasgd_) backups_[worker] = part.Snapshot();  // copy-on-write keeps it as it was
  }

 private:
  const Optimizer& optimizer_;
  bool inverse_, dcasgd_;
  float lambda_;
  std::map<int32_t, std::shared_ptr<const std::vector<float>>> backups_;
  std::vector<float> compensated_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeSum(const AggregatorOptions& options, const Optimizer& optimizer) {
  return std::make_unique<Sum>(options, optimizer);
}

}  // namespace hetps
