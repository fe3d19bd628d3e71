#include <map>

#include "durable.pb.h"
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
  explicit FedAsync(const AlgorithmSpec& spec)
      : alpha_(spec.Number("alpha")),
        staleness_(spec.Text("staleness")),
        exponent_(spec.Number("exponent")),
        hinge_a_(spec.Number("a")),
        hinge_b_(spec.Number("b")) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* delta) override {
    const int64_t sigma = part.version() - info.base_version;
    const float alpha = static_cast<float>(alpha_ * Weight(sigma));
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
  bool tracks_reads() const override { return true; }
  void Save(proto::AggregatorState& out) const override {
    SaveByWorker(bases_, (*out.mutable_per_worker())["bases"]);
  }
  Status Load(const proto::AggregatorState& in) override {
    auto b = in.per_worker().find("bases");
    return b == in.per_worker().end() ? Status() : LoadByWorker(b->second, bases_);
  }

 private:
  double Weight(int64_t sigma) const {
    if (staleness_ == "constant") return 1.0;
    if (staleness_ == "hinge") return HingeStaleness(sigma, hinge_a_, hinge_b_);
    return PolynomialStaleness(sigma, exponent_);
  }

  double alpha_;
  std::string staleness_;
  double exponent_, hinge_a_, hinge_b_;
  ReadSnapshots bases_;
  std::vector<float> mixed_;
};

}  // namespace

void RegisterFedAsync(AggregatorRegistry& r) {
  r.Add(
      {"fedasync",
       "mixes x = (1 - alpha_t) x + alpha_t x_new per client update, alpha_t = alpha * "
       "s(staleness) (Xie, Koyejo, Gupta 2019)",
       {ParamDef::Real("alpha", "0.6", 0, 1, "mixing weight alpha", /*min_open=*/true),
        ParamDef::Choice("staleness", "polynomial", {"constant", "polynomial", "hinge"},
                         "s: 1, (1 + sigma)^-exponent, or the hinge"),
        ParamDef::Real("exponent", "0.5", 0, 100, "polynomial: the exponent")
            .OnlyWith("staleness", {"polynomial"}),
        ParamDef::Real("a", "4", 0, 1e6, "hinge: 1 / (a (sigma - b) + 1) past b",
                       /*min_open=*/true)
            .OnlyWith("staleness", {"hinge"}),
        ParamDef::Real("b", "2", 0, 1e6, "hinge: staleness with full weight")
            .OnlyWith("staleness", {"hinge"})}},
      {[](const AlgorithmSpec& spec, const Optimizer&) { return std::make_unique<FedAsync>(spec); },
       {ApplySchedule::kOnArrival, ApplySchedule::kCommitted}});
}

}  // namespace hetps
