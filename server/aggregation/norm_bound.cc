#include <cmath>
#include <random>

#include "server/aggregation/robust.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// Norm bounding (Sun et al., "Can You Really Backdoor Federated Learning?", 2019): each update
// is scaled down to L2 norm at most `max` (within this partition), then the group is averaged;
// with noise > 0, Gaussian noise of standard deviation noise * max is added to each coordinate
// of the mean ("weak differential privacy"), drawn from (seed, partition id, version) so that a
// run repeats exactly.
class NormBound final : public RobustAggregator {
 public:
  NormBound(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : RobustAggregator(spec, optimizer),
        max_(spec.Number("max")),
        noise_(spec.Number("noise")),
        seed_(static_cast<uint64_t>(spec.Int("seed"))) {}

 protected:
  void Combine(const PartitionState& part, const UpdateGroup& g, float* out) override {
    std::vector<double> sum(static_cast<size_t>(g.n), 0.0);
    for (size_t i = 0; i < g.count; ++i) {
      const float* row = g.row(i);
      double norm = 0;
      for (int64_t j = 0; j < g.n; ++j) norm += static_cast<double>(row[j]) * row[j];
      norm = std::sqrt(norm);
      const double scale = norm > max_ ? max_ / norm : 1.0;
      for (int64_t j = 0; j < g.n; ++j) sum[j] += scale * row[j];
    }
    std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(part.info().id) * 7919 +
                        static_cast<uint64_t>(part.version()));
    std::normal_distribution<double> gauss(0.0, noise_ * max_);
    for (int64_t j = 0; j < g.n; ++j) {
      out[j] = static_cast<float>(sum[j] / static_cast<double>(g.count) +
                                  (noise_ > 0 ? gauss(rng) : 0.0));
    }
  }

 private:
  double max_, noise_;
  uint64_t seed_;
};

}  // namespace

void RegisterNormBound(AggregatorRegistry& r) {
  r.Add(
      {"norm_bound",
       "one step on the mean of a round's (or k arrivals') deltas, each clipped to L2 norm "
       "max in the partition, plus optional Gaussian noise (Sun et al., 2019)",
       {ParamDef::Real("max", "1", 0, 1e12, "norm bound of an update's slice of a partition", true),
        ParamDef::Real("noise", "0", 0, 1e6, "noise std as a multiple of max (0: none)"),
        ParamDef::Int("seed", "1", 0, 1e15, "seed of the noise"), RobustGroupParam()}},
      {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
         return std::make_unique<NormBound>(spec, optimizer);
       },
       RobustSchedules()});
}

}  // namespace hetps
