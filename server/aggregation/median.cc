#include "server/aggregation/robust.h"

namespace hetps {
namespace {

// Coordinate-wise median (Yin et al., ICML'18): per coordinate, the median of the group's
// values; with fewer than half of the group Byzantine, each coordinate stays within the
// honest values' range.
class Median final : public RobustAggregator {
 public:
  using RobustAggregator::RobustAggregator;

 protected:
  void Combine(const PartitionState&, const UpdateGroup& group, float* out) override {
    CoordinateMedian(group, out);
  }
};

}  // namespace

void RegisterMedian(AggregatorRegistry& r) {
  r.Add({"median",
         "one step on the coordinate-wise median of a round's (or k arrivals') deltas, robust "
         "to fewer than half Byzantine clients (Yin et al., ICML'18)",
         {RobustGroupParam()}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<Median>(spec, optimizer);
         },
         RobustSchedules()});
}

}  // namespace hetps
