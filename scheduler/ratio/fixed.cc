#include "scheduler/ratio/ratio.h"

namespace hetps {
namespace {

// The same ratio every aggregation (AAFL's fixed-ratio baselines; alpha = 1 is synchronous).
class FixedRatio final : public RatioPolicy {
 public:
  explicit FixedRatio(double alpha) : alpha_(alpha) {}
  double Ratio(const RatioState&) override { return alpha_; }

 private:
  double alpha_;
};

}  // namespace

void RegisterFixedRatio(RatioRegistry& r) {
  r.Add({"fixed",
         "every aggregation takes the earliest ceil(alpha N) uploads",
         {ParamDef::Real("alpha", "0.5", 0, 1, "the aggregation ratio", /*min_open=*/true)}},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<FixedRatio>(spec.Number("alpha"));
        }});
}

}  // namespace hetps
