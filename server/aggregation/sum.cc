#include <fmt/format.h>

#include <cmath>
#include <map>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/aggregation/compensator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// Every gradient through the server optimizer, optionally scaled by 1/sigma (Zhang et al.,
// IJCAI'16: alpha0/sigma, alpha0 at sigma = 0) and delay-compensated first by the compensator
// `compensation` names (server/aggregation/compensator.h: DC-ASGD, DC-ASGD-a, LC-ASGD;
// ALGORITHMS.md §6). Under softsync (a push with a window c) gradients are always scaled by
// alpha0/sigma and applied c at a time as their mean.
class Sum final : public Aggregator {
 public:
  Sum(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : optimizer_(optimizer),
        inverse_(spec.Is("staleness_lr", "inverse")),
        compensator_(MakeCompensator(spec)),
        reads_(compensator_ && compensator_->needs_reads()) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* g) override {
    const int64_t sigma = part.version() - info.base_version;
    const bool inverse = inverse_ || info.window > 0;
    const float scale = inverse && sigma > 0 ? 1.0f / static_cast<float>(sigma) : 1.0f;
    const float* update = Compensate(part, info, g);
    if (info.window <= 0) {
      part.ApplyGradient(optimizer_, update, scale);
      return;
    }
    const int64_t n = part.info().length;
    if (window_.empty()) window_.assign(n, 0.0f);
    for (int64_t i = 0; i < n; ++i) window_[i] += scale * update[i];
    if (++in_window_ >= info.window) Flush(part);
  }

  void Flush(PartitionState& part) override {
    if (in_window_ == 0) return;
    part.ApplyGradient(optimizer_, window_.data(), 1.0f / static_cast<float>(in_window_));
    window_.clear();
    in_window_ = 0;
  }

  void OnPull(PartitionState& part, int32_t worker) override {
    if (reads_) backups_[worker] = part.Snapshot();  // copy-on-write keeps it as it was
  }
  bool tracks_reads() const override { return reads_; }

  void Save(proto::AggregatorState& out) const override {
    if (in_window_ > 0) {
      (*out.mutable_floats())["window"] = FloatBytes(window_);
      (*out.mutable_numbers())["in_window"] = static_cast<double>(in_window_);
    }
    SaveByWorker(backups_, (*out.mutable_per_worker())["backups"]);
    if (compensator_) compensator_->Save(out);
  }
  Status Load(const proto::AggregatorState& in) override {
    if (auto it = in.floats().find("window"); it != in.floats().end()) {
      if (Status s = FloatsFrom(it->second, window_); !s.ok()) return s;
    }
    if (compensator_) {
      if (Status s = compensator_->Load(in); !s.ok()) return s;
    }
    auto n = in.numbers().find("in_window");
    in_window_ = n == in.numbers().end() ? 0 : static_cast<int64_t>(n->second);
    auto b = in.per_worker().find("backups");
    return b == in.per_worker().end() ? Status() : LoadByWorker(b->second, backups_);
  }

 private:
  const float* Compensate(const PartitionState& part, const PushInfo& info, const float* g) {
    if (!compensator_) return g;
    CompensationInput in;
    in.worker = info.worker;
    in.version = part.version();
    in.base_version = info.base_version;
    in.loss = info.loss;
    in.n = part.info().length;
    in.values = part.values();
    if (auto bak = backups_.find(info.worker); bak != backups_.end()) {
      in.read = bak->second->data();
    }
    return compensator_->Compensate(in, g, compensated_);
  }

  const Optimizer& optimizer_;
  bool inverse_;
  std::unique_ptr<Compensator> compensator_;  // null: none
  bool reads_;                                // the compensator needs what each worker read
  ReadSnapshots backups_;
  std::vector<float> compensated_;
  std::vector<float> window_;  // softsync: the scaled gradients of the open window
  int64_t in_window_ = 0;
};

// Defined under every schedule. Committed uploads (committed) go through it one by one, as on
// arrival. Rounds (bsp, backup, semi_async) combine held gradients themselves (RoundSpec): every
// gradient of a round shares its base, and neither 1/sigma nor DC-ASGD's correction apply.
Status PerPushOptionsOnly(const AlgorithmSpec& spec, ApplySchedule schedule) {
  const bool per_push = schedule == ApplySchedule::kOnArrival ||
                        schedule == ApplySchedule::kWindowed ||
                        schedule == ApplySchedule::kCommitted;
  if (per_push || (spec.Is("staleness_lr", "none") && spec.Is("compensation", "none"))) {
    return Status();
  }
  return Status::InvalidArgument(
      fmt::format("staleness_lr=inverse and compensation act per push; with {} a round combines "
                  "its gradients itself",
                  ScheduleName(schedule)));
}

}  // namespace

void RegisterSum(AggregatorRegistry& r) {
  std::vector<ParamDef> params = {
      ParamDef::Choice("staleness_lr", "none", {"none", "inverse"},
                       "inverse: a gradient of staleness s counts 1/s")};
  for (ParamDef& p : CompensationParams()) params.push_back(std::move(p));
  r.Add({"sum",
         "every gradient through the server optimizer; optionally scaled by 1/staleness "
         "(Zhang et al., IJCAI'16) or delay-compensated (DC-ASGD, Zheng et al., ICML'17; "
         "LC-ASGD, after Li, He et al., ICPP'20)",
         std::move(params)},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<Sum>(spec, optimizer);
         },
         EverySchedule(), PerPushOptionsOnly,
         [](const AlgorithmSpec& spec) {  // scaling or compensating needs each push's own
           return spec.Is("staleness_lr", "none") && spec.Is("compensation", "none");
         }});
}

}  // namespace hetps
