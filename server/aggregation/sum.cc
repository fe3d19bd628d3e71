#include <fmt/format.h>

#include <cmath>
#include <map>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// Every gradient through the server optimizer, optionally scaled by 1/sigma (Zhang et al.,
// IJCAI'16: alpha0/sigma, alpha0 at sigma = 0) and delay-compensated (DC-ASGD, Zheng et al.,
// ICML'17: g + lambda * g*g*(w - w_bak[m]), w_bak[m] = the values worker m last read; its
// adaptive form DC-ASGD-a takes lambda = lambda0 / sqrt(MS + eps) element-wise, MS = ms_decay *
// MS + (1 - ms_decay) * g*g over every push of the partition, ALGORITHMS.md §6). Under
// softsync (a push with a window c) gradients are always scaled by alpha0/sigma and applied c
// at a time as their mean.
class Sum final : public Aggregator {
 public:
  Sum(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : optimizer_(optimizer),
        inverse_(spec.Is("staleness_lr", "inverse")),
        dcasgd_(!spec.Is("compensation", "none")),
        adaptive_(spec.Is("compensation", "dcasgd_a")),
        lambda_(static_cast<float>(spec.Number("lambda"))),
        lambda0_(static_cast<float>(spec.Number("lambda0"))),
        ms_decay_(static_cast<float>(spec.Number("ms_decay"))) {}

  void OnPush(PartitionState& part, const PushInfo& info, const float* g) override {
    const int64_t sigma = part.version() - info.base_version;
    const bool inverse = inverse_ || info.window > 0;
    const float scale = inverse && sigma > 0 ? 1.0f / static_cast<float>(sigma) : 1.0f;
    const float* update = Compensate(part, info.worker, g);
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
    if (dcasgd_) backups_[worker] = part.Snapshot();  // copy-on-write keeps it as it was
  }
  bool tracks_reads() const override { return dcasgd_; }

  void Save(proto::AggregatorState& out) const override {
    if (in_window_ > 0) {
      (*out.mutable_floats())["window"] = FloatBytes(window_);
      (*out.mutable_numbers())["in_window"] = static_cast<double>(in_window_);
    }
    SaveByWorker(backups_, (*out.mutable_per_worker())["backups"]);
    if (!mean_square_.empty()) (*out.mutable_floats())["mean_square"] = FloatBytes(mean_square_);
  }
  Status Load(const proto::AggregatorState& in) override {
    if (auto it = in.floats().find("window"); it != in.floats().end()) {
      if (Status s = FloatsFrom(it->second, window_); !s.ok()) return s;
    }
    if (auto it = in.floats().find("mean_square"); it != in.floats().end()) {
      if (Status s = FloatsFrom(it->second, mean_square_); !s.ok()) return s;
    }
    auto n = in.numbers().find("in_window");
    in_window_ = n == in.numbers().end() ? 0 : static_cast<int64_t>(n->second);
    auto b = in.per_worker().find("backups");
    return b == in.per_worker().end() ? Status() : LoadByWorker(b->second, backups_);
  }

 private:
  // DC-ASGD: g + lambda * g*g*(w - w_bak) when the worker has read before, else g itself.
  // DC-ASGD-a: the same with lambda0 / sqrt(MS + eps) per element, MS first updated by g.
  const float* Compensate(const PartitionState& part, int32_t worker, const float* g) {
    const int64_t n = part.info().length;
    if (adaptive_) {
      if (mean_square_.empty()) mean_square_.assign(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        mean_square_[i] = ms_decay_ * mean_square_[i] + (1 - ms_decay_) * g[i] * g[i];
      }
    }
    auto bak = dcasgd_ ? backups_.find(worker) : backups_.end();
    if (bak == backups_.end()) return g;
    compensated_.resize(n);
    const float* w = part.values();
    const float* w_bak = bak->second->data();
    for (int64_t i = 0; i < n; ++i) {
      const float lambda = adaptive_ ? lambda0_ / std::sqrt(mean_square_[i] + kEpsilon) : lambda_;
      compensated_[i] = g[i] + lambda * g[i] * g[i] * (w[i] - w_bak[i]);
    }
    return compensated_.data();
  }

  static constexpr float kEpsilon = 1e-7f;

  const Optimizer& optimizer_;
  bool inverse_, dcasgd_, adaptive_;
  float lambda_, lambda0_, ms_decay_;
  std::vector<float> mean_square_;  // DC-ASGD-a: MS per element of the partition
  ReadSnapshots backups_;
  std::vector<float> compensated_;
  std::vector<float> window_;  // softsync: the scaled gradients of the open window
  int64_t in_window_ = 0;
};

// Committed uploads (committed) go through it one by one, as on arrival. Rounds (bsp, backup,
// semi_async) combine held gradients themselves (RoundSpec): every
// gradient of a round shares its base, and neither 1/sigma nor DC-ASGD's correction apply.
Status SumFits(const AlgorithmSpec& spec, ApplySchedule schedule) {
  const bool per_push = schedule == ApplySchedule::kOnArrival ||
                        schedule == ApplySchedule::kWindowed ||
                        schedule == ApplySchedule::kCommitted;
  if (per_push || (spec.Is("staleness_lr", "none") && spec.Is("compensation", "none"))) {
    return Status();
  }
  return Status::InvalidArgument(fmt::format(
      "staleness_lr=inverse and compensation=dcasgd(_a) act per push; with {} a round combines "
      "its gradients itself",
      ScheduleName(schedule)));
}

}  // namespace

void RegisterSum(AggregatorRegistry& r) {
  r.Add({"sum",
         "every gradient through the server optimizer; optionally scaled by 1/staleness "
         "(Zhang et al., IJCAI'16) or delay-compensated (DC-ASGD, Zheng et al., ICML'17)",
         {ParamDef::Choice("staleness_lr", "none", {"none", "inverse"},
                           "inverse: a gradient of staleness s counts 1/s"),
          ParamDef::Choice("compensation", "none", {"none", "dcasgd", "dcasgd_a"},
                           "dcasgd: g + lambda g*g*(w - w_read); dcasgd_a: lambda adapted per "
                           "element, lambda0 / sqrt(mean square of g)"),
          ParamDef::Real("lambda", "0.04", 0, 1e6, "DC-ASGD's lambda"),
          ParamDef::Real("lambda0", "2", 0, 1e6, "DC-ASGD-a's lambda0"),
          ParamDef::Real("ms_decay", "0.95", 0, 0.999999,
                         "DC-ASGD-a: the mean square's decay per push")}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<Sum>(spec, optimizer);
         },
         SumFits});
}

}  // namespace hetps
