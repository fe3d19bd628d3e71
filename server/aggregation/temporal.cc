#include <fmt/format.h>

#include <cmath>
#include <map>
#include <numbers>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps {

std::vector<double> TemporalWeights(const std::vector<double>& samples,
                                    const std::vector<int64_t>& timestamps, int64_t t) {
  const double a = std::numbers::e / 2;
  std::vector<double> w(samples.size());
  double total = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    w[k] = samples[k] * std::pow(a, -static_cast<double>(t - timestamps[k]));
    total += w[k];
  }
  for (double& x : w) x = total > 0 ? x / total : 0;
  return w;
}

namespace {

// Temporally weighted aggregation (Chen, Sun, Jin, TNNLS'19; ALGORITHMS.md §5), per partition,
// so per layer. Each round (a bsp clock), every upload replaces that client's stored model,
// w_k = (the model it read) - delta, stamped with the round; then the partition becomes the
// average of every stored client model weighted by n_k * a^-(t - ts_k), a = e/2. A partition
// nobody uploaded this round (a deep layer on a shallow-only round) is left unchanged.
class Temporal final : public Aggregator {
 public:
  bool rounds() const override { return true; }
  // Outside rounds (which CheckCombination rules out) an update is treated as in a round alone.
  void OnPush(PartitionState& part, const PushInfo& info, const float* delta) override {
    Upload(part, info, delta);
    EndRound(part, info.clock);
  }
  void OnPull(PartitionState& part, int32_t worker) override { bases_[worker] = part.Snapshot(); }
  bool tracks_reads() const override { return true; }
  void Save(proto::AggregatorState& out) const override {
    SaveByWorker(bases_, (*out.mutable_per_worker())["bases"]);
    proto::FloatsByWorker& models = (*out.mutable_per_worker())["models"];
    proto::FloatsByWorker& samples = (*out.mutable_per_worker())["samples"];
    proto::FloatsByWorker& rounds = (*out.mutable_per_worker())["rounds"];
    for (const auto& [w, c] : clients_) {
      (*models.mutable_floats())[w] = FloatBytes(c.model);
      (*samples.mutable_numbers())[w] = c.samples;
      (*rounds.mutable_numbers())[w] = static_cast<double>(c.round);
    }
  }
  Status Load(const proto::AggregatorState& in) override {
    auto group = [&](const char* name) -> const proto::FloatsByWorker& {
      auto it = in.per_worker().find(name);
      return it == in.per_worker().end() ? proto::FloatsByWorker::default_instance() : it->second;
    };
    if (Status s = LoadByWorker(group("bases"), bases_); !s.ok()) return s;
    clients_.clear();
    for (const auto& [w, bytes] : group("models").floats()) {
      Client& c = clients_[w];
      if (Status s = FloatsFrom(bytes, c.model); !s.ok()) return s;
      auto n = group("samples").numbers().find(w);
      auto r = group("rounds").numbers().find(w);
      if (n == group("samples").numbers().end() || r == group("rounds").numbers().end()) {
        return Status::Malformed(fmt::format("temporal state of worker {} is incomplete", w));
      }
      c.samples = n->second;
      c.round = static_cast<int64_t>(r->second);
    }
    return Status();
  }

  void Upload(PartitionState& part, const PushInfo& info, const float* delta) override {
    const int64_t n = part.info().length;
    auto base = bases_.find(info.worker);
    const float* x = base != bases_.end() ? base->second->data() : part.values();
    Client& c = clients_[info.worker];
    c.model.resize(n);
    for (int64_t i = 0; i < n; ++i) c.model[i] = x[i] - delta[i];
    c.samples = info.weight > 0 ? info.weight : 1;
    c.round = info.clock + 1;
    uploaded_ = true;
  }

  void EndRound(PartitionState& part, int64_t clock) override {
    if (!uploaded_) return;  // nobody sent this layer this round: unchanged
    uploaded_ = false;
    std::vector<double> samples;
    std::vector<int64_t> stamps;
    for (const auto& [w, c] : clients_) {
      samples.push_back(c.samples);
      stamps.push_back(c.round);
    }
    const std::vector<double> weight = TemporalWeights(samples, stamps, clock + 1);
    const int64_t n = part.info().length;
    mixed_.assign(n, 0.0f);
    size_t k = 0;
    for (const auto& [w, c] : clients_) {
      const float wk = static_cast<float>(weight[k++]);
      for (int64_t i = 0; i < n; ++i) mixed_[i] += wk * c.model[i];
    }
    part.SetValues(mixed_.data());
  }

 private:
  struct Client {
    std::vector<float> model;
    double samples = 1;
    int64_t round = 0;
  };
  ReadSnapshots bases_;
  std::map<int32_t, Client> clients_;
  std::vector<float> mixed_;
  bool uploaded_ = false;
};

}  // namespace

// Its rounds are bsp's clocks: every live client uploads (or skips a layer) each round.
void RegisterTemporal(AggregatorRegistry& r) {
  r.Add({"temporal",
         "per layer, the average of every client's latest model weighted by samples * "
         "(e/2)^-(rounds since upload) (Chen, Sun, Jin, TNNLS'19)",
         {}},
        {[](const AlgorithmSpec&, const Optimizer&) { return std::make_unique<Temporal>(); },
         {ApplySchedule::kLockstepRounds, ApplySchedule::kScheduledRounds}});
}

}  // namespace hetps
