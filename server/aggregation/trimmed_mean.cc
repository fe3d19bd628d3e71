#include <algorithm>
#include <cmath>

#include "server/aggregation/robust.h"

namespace hetps {
namespace {

// Coordinate-wise trimmed mean (Yin et al., ICML'18): per coordinate, drop the b = floor(beta
// n) largest and b smallest of the group's n values and average the rest. When 2b would leave
// nothing (a small group), b = (n - 1) / 2: the middle value or two.
class TrimmedMean final : public RobustAggregator {
 public:
  TrimmedMean(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : RobustAggregator(spec, optimizer), beta_(spec.Number("beta")) {}

 protected:
  void Combine(const PartitionState&, const UpdateGroup& g, float* out) override {
    size_t b = static_cast<size_t>(std::floor(beta_ * static_cast<double>(g.count)));
    if (2 * b >= g.count) b = (g.count - 1) / 2;
    std::vector<float> column(g.count);
    for (int64_t j = 0; j < g.n; ++j) {
      for (size_t i = 0; i < g.count; ++i) column[i] = g.row(i)[j];
      std::sort(column.begin(), column.end());
      double sum = 0;
      for (size_t i = b; i < g.count - b; ++i) sum += column[i];
      out[j] = static_cast<float>(sum / static_cast<double>(g.count - 2 * b));
    }
  }

 private:
  double beta_;
};

}  // namespace

void RegisterTrimmedMean(AggregatorRegistry& r) {
  r.Add({"trimmed_mean",
         "one step on the coordinate-wise mean of a round's (or k arrivals') deltas without "
         "their beta*n largest and smallest values (Yin et al., ICML'18)",
         {ParamDef::Real("beta", "0.1", 0, 0.5, "share trimmed at each end", false),
          RobustGroupParam()}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<TrimmedMean>(spec, optimizer);
         },
         RobustSchedules()});
}

}  // namespace hetps
