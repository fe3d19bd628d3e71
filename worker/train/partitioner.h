// Which training samples each worker gets. Both splits are seeded and computed identically by
// every worker, so no coordination is needed: worker r takes part r.
//   iid:       a seeded shuffle cut into near-equal parts
//   dirichlet: non-IID label skew; for each class, shares drawn from Dirichlet(alpha) over the
//              workers (small alpha: each worker sees few classes; large alpha: close to iid)
//   shards:    pathological label skew (McMahan et al. 2017): the samples sorted by label, cut
//              into workers * per_worker equal shards, each worker given per_worker of them at
//              random, so it sees at most per_worker classes
#pragma once

#include <cstdint>
#include <vector>

namespace hetps {

// parts[r] = the sample indices of worker r; every index in [0, n) appears exactly once.
std::vector<std::vector<int64_t>> PartitionIid(int64_t n, int workers, uint64_t seed);
std::vector<std::vector<int64_t>> PartitionDirichlet(const std::vector<int32_t>& labels,
                                                     int32_t classes, int workers, double alpha,
                                                     uint64_t seed);
std::vector<std::vector<int64_t>> PartitionShards(const std::vector<int32_t>& labels, int workers,
                                                  int per_worker, uint64_t seed);
// A validation split of n samples: `held` (a seeded draw of `held` of them) and `rest` (the
// others, which the workers' split then divides), both in increasing order.
struct HeldOut {
  std::vector<int64_t> held, rest;
};
HeldOut HoldOut(int64_t n, int64_t held, uint64_t seed);
// Per-worker label counts of a partition (for reports).
std::vector<std::vector<int64_t>> LabelHistogram(const std::vector<std::vector<int64_t>>& parts,
                                                 const std::vector<int32_t>& labels,
                                                 int32_t classes);

}  // namespace hetps
