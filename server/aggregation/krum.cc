#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>

#include "server/aggregation/robust.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

// (Multi-)Krum (Blanchard et al., NeurIPS'17): of n updates with at most f Byzantine (n >
// 2f + 2), score(i) = the sum of squared distances from update i to its n - f - 2 nearest
// others; the m lowest-scoring updates are averaged (m = 1: Krum picks one). Ties go to the
// earlier update. A group too small for f (n <= 2f + 2) takes the coordinate-wise median
// instead, with a warning.
class Krum final : public RobustAggregator {
 public:
  Krum(const AlgorithmSpec& spec, const Optimizer& optimizer)
      : RobustAggregator(spec, optimizer), f_(spec.Int("f")), m_(spec.Int("m")) {}

 protected:
  void Combine(const PartitionState& part, const UpdateGroup& g, float* out) override {
    const size_t n = g.count;
    if (n <= static_cast<size_t>(2 * f_ + 2)) {
      if (!warned_) {
        spdlog::warn(
            "krum: partition {} combined {} updates, too few for f={} (needs more "
            "than {}); took their coordinate-wise median",
            part.info().id, n, f_, 2 * f_ + 2);
        warned_ = true;
      }
      return CoordinateMedian(g, out);
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const std::vector<double> score = Scores(g);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return score[a] < score[b]; });
    const size_t m = std::min(n, static_cast<size_t>(m_));
    std::fill(out, out + g.n, 0.0f);
    for (size_t k = 0; k < m; ++k) {
      const float* row = g.row(order[k]);
      for (int64_t j = 0; j < g.n; ++j) out[j] += row[j];
    }
    for (int64_t j = 0; j < g.n; ++j) out[j] /= static_cast<float>(m);
  }

 private:
  std::vector<double> Scores(const UpdateGroup& g) const {
    const size_t n = g.count;
    std::vector<double> d(n * n, 0.0);
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        double s = 0;
        for (int64_t j = 0; j < g.n; ++j) {
          const double x = static_cast<double>(g.row(a)[j]) - g.row(b)[j];
          s += x * x;
        }
        d[a * n + b] = d[b * n + a] = s;
      }
    }
    const size_t nearest = n - static_cast<size_t>(f_) - 2;
    std::vector<double> score(n), others;
    for (size_t a = 0; a < n; ++a) {
      others.clear();
      for (size_t b = 0; b < n; ++b) {
        if (b != a) others.push_back(d[a * n + b]);
      }
      std::partial_sort(others.begin(), others.begin() + nearest, others.end());
      score[a] = std::accumulate(others.begin(), others.begin() + nearest, 0.0);
    }
    return score;
  }

  int64_t f_, m_;
  bool warned_ = false;
};

}  // namespace

void RegisterKrum(AggregatorRegistry& r) {
  r.Add({"krum",
         "one step on the mean of the m updates of a round (or k arrivals) closest to their "
         "n-f-2 nearest others: Krum (m=1) and Multi-Krum (Blanchard et al., NeurIPS'17)",
         {ParamDef::Int("f", "1", 0, 1e6, "Byzantine clients tolerated (needs n > 2f+2)"),
          ParamDef::Int("m", "1", 1, 1e6, "updates averaged (1: Krum)"), RobustGroupParam()}},
        {[](const AlgorithmSpec& spec, const Optimizer& optimizer) {
           return std::make_unique<Krum>(spec, optimizer);
         },
         RobustSchedules()});
}

}  // namespace hetps
