#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// FedBuff (Nguyen et al., AISTATS'22): B += s(sigma) * delta for each arriving client delta;
// at the K-th, one server-optimizer step on B / K (with SGD and lr = eta_g: w -= eta_g * B / K),
// then the buffer starts over. s(sigma) = (1 + sigma)^-a (FLSim's polynomial weight).
class FedBuff final : public Aggregator {
 public:
  FedBuff(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : optimizer_(optimizer), k_(static_cast<int>(spec.Int("k"))), a_(spec.Number("exponent")) {}

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

  void Save(proto::AggregatorState& out) const override {
    if (count_ == 0) return;
    (*out.mutable_floats())["buffer"] = FloatBytes(buffer_);
    (*out.mutable_numbers())["count"] = count_;
  }
  Status Load(const proto::AggregatorState& in) override {
    auto count = in.numbers().find("count");
    count_ = count == in.numbers().end() ? 0 : static_cast<int>(count->second);
    auto buffer = in.floats().find("buffer");
    if (buffer == in.floats().end()) {
      buffer_.clear();
      return count_ == 0 ? Status() : Status::Malformed("fedbuff state has a count but no buffer");
    }
    return FloatsFrom(buffer->second, buffer_);
  }

 private:
  const Optimizer& optimizer_;
  int k_;
  double a_;
  std::vector<float> buffer_;
  int count_ = 0;
};

}  // namespace

// Each push is one client's delta, buffered on arrival; rounds or softsync's windows would
// bypass the buffer.
void RegisterFedBuff(AggregatorRegistry& r) {
  r.Add({"fedbuff",
         "buffers K deltas weighted by (1 + staleness)^-a, then one optimizer step on their "
         "mean (Nguyen et al., AISTATS'22)",
         {ParamDef::Int("k", "4", 1, 1e6, "deltas per server step"),
          ParamDef::Real("exponent", "0.5", 0, 100, "a in (1 + staleness)^-a")}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<FedBuff>(spec, optimizer);
         },
         {ApplySchedule::kOnArrival, ApplySchedule::kCommitted}});
}

}  // namespace hetps
