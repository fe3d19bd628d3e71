#include "common/quorum.h"

#include <algorithm>

namespace hetps {

int64_t AutoQuorum(std::vector<double> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t best = static_cast<int64_t>(intervals.size());
  double best_rate = 0;
  for (size_t k = 1; k <= intervals.size(); ++k) {
    const double t = std::max(intervals[k - 1], 1e-9);
    const double rate = static_cast<double>(k) / t;  // updates per unit time at quorum k
    if (rate >= best_rate) {                         // ties: the larger quorum
      best_rate = rate;
      best = static_cast<int64_t>(k);
    }
  }
  return best;
}

}  // namespace hetps
