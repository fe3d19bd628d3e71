#include <algorithm>

#include "scheduler/selection/selection.h"

namespace hetps {
namespace {

// Uniform sampling without replacement (FedAvg's client sampling, McMahan et al. 2017), seeded.
class RandomSelection final : public SelectionPolicy {
 public:
  std::vector<int32_t> Select(const std::vector<const ClientRecord*>& idle, int count, int64_t,
                              int64_t, std::mt19937_64& rng) override {
    std::vector<int32_t> ids;
    std::vector<const ClientRecord*> sorted = idle;  // the draw depends on the seed only
    SortByRank(sorted);
    for (const ClientRecord* c : sorted) ids.push_back(c->id);
    std::vector<int32_t> picked;
    std::sample(ids.begin(), ids.end(), std::back_inserter(picked), count, rng);
    return picked;
  }
};

}  // namespace

void RegisterRandomSelection(SelectionRegistry& r) {
  r.Add({"random", "uniform sampling of the idle clients without replacement (FedAvg)", {}},
        {[](const AlgorithmSpec&) { return std::make_unique<RandomSelection>(); }});
}

}  // namespace hetps
