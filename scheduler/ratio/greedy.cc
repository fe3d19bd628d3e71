#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/ratio/ratio.h"

namespace hetps {
namespace {

// AAFL's greedy baseline (ALGORITHMS.md §9): the ratio that minimises the predicted time per
// unit of progress. An aggregation of the earliest K uploads takes t_(K), the K-th smallest
// expected training time; its progress is taken to grow as sqrt(K) (averaging K updates cuts
// the variance of the step K-fold). Subject to the budget, at most `budget` uploads per second
// (0: none), it picks the K minimising t_(K) / sqrt(K); if no K fits the budget, the one with
// the fewest uploads per second. Before two clients are measured it takes every upload.
class GreedyRatio final : public RatioPolicy {
 public:
  explicit GreedyRatio(double budget) : budget_(budget) {}
  double Ratio(const RatioState& s) override {
    if (s.clients <= 0 || s.train_s.size() < 2) return 1.0;
    std::vector<double> t = s.train_s;
    std::sort(t.begin(), t.end());
    const int n = std::min<int>(s.clients, static_cast<int>(t.size()));
    int best = -1, cheapest = 1;
    double best_cost = std::numeric_limits<double>::infinity();
    double cheapest_rate = std::numeric_limits<double>::infinity();
    for (int k = 1; k <= n; ++k) {
      const double time = std::max(t[k - 1], 1e-9);
      const double rate = k / time;  // uploads per second
      if (rate < cheapest_rate) cheapest_rate = rate, cheapest = k;
      if (budget_ > 0 && rate > budget_) continue;
      const double cost = time / std::sqrt(static_cast<double>(k));
      if (cost < best_cost) best_cost = cost, best = k;
    }
    const int k = best > 0 ? best : cheapest;
    return static_cast<double>(k) / s.clients;
  }

 private:
  double budget_;
};

}  // namespace

void RegisterGreedyRatio(RatioRegistry& r) {
  r.Add({"greedy",
         "AAFL's greedy baseline: the ratio minimising t_(K) / sqrt(K) over the clients' "
         "training times, at most `budget` uploads a second (Liu et al., TMC)",
         {ParamDef::Real("budget", "0", 0, 1e9, "uploads per second at most (0: no limit)")}},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<GreedyRatio>(spec.Number("budget"));
        }});
}

}  // namespace hetps
