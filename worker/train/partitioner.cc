#include "worker/train/partitioner.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace hetps {

std::vector<std::vector<int64_t>> PartitionIid(int64_t n, int workers, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int64_t>> parts(workers);
  int64_t begin = 0;
  for (int r = 0; r < workers; ++r) {
    const int64_t size = n / workers + (r < n % workers ? 1 : 0);
    parts[r].assign(order.begin() + begin, order.begin() + begin + size);
    begin += size;
  }
  return parts;
}

std::vector<std::vector<int64_t>> PartitionDirichlet(const std::vector<int32_t>& labels,
                                                     int32_t classes, int workers, double alpha,
                                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(alpha, 1.0);
  std::vector<std::vector<int64_t>> by_class(classes);
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(static_cast<int64_t>(i));
  std::vector<std::vector<int64_t>> parts(workers);
  for (auto& members : by_class) {
    std::shuffle(members.begin(), members.end(), rng);
    std::vector<double> share(workers);
    double total = 0;
    for (double& s : share) total += (s = gamma(rng));
    // Cut points from the cumulative shares; the last part takes the rounding remainder.
    int64_t begin = 0;
    double cumulative = 0;
    for (int r = 0; r < workers; ++r) {
      cumulative += total > 0 ? share[r] / total : 1.0 / workers;
      const int64_t end = r + 1 == workers
                              ? static_cast<int64_t>(members.size())
                              : std::min<int64_t>(static_cast<int64_t>(members.size()),
                                                  std::llround(cumulative * members.size()));
      parts[r].insert(parts[r].end(), members.begin() + begin, members.begin() + end);
      begin = std::max(begin, end);
    }
  }
  for (auto& p : parts) std::shuffle(p.begin(), p.end(), rng);
  return parts;
}

std::vector<std::vector<int64_t>> PartitionShards(const std::vector<int32_t>& labels, int workers,
                                                  int per_worker, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> order(labels.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);  // ties within a label in seeded order
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return labels[a] < labels[b]; });
  const int64_t shards = static_cast<int64_t>(workers) * per_worker;
  std::vector<int64_t> shard_ids(shards);
  std::iota(shard_ids.begin(), shard_ids.end(), 0);
  std::shuffle(shard_ids.begin(), shard_ids.end(), rng);
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<std::vector<int64_t>> parts(workers);
  for (int64_t k = 0; k < shards; ++k) {
    const int64_t s = shard_ids[k];
    const int64_t begin = s * n / shards, end = (s + 1) * n / shards;
    auto& part = parts[k / per_worker];
    part.insert(part.end(), order.begin() + begin, order.begin() + end);
  }
  for (auto& p : parts) std::shuffle(p.begin(), p.end(), rng);
  return parts;
}

std::vector<std::vector<int64_t>> LabelHistogram(const std::vector<std::vector<int64_t>>& parts,
                                                 const std::vector<int32_t>& labels,
                                                 int32_t classes) {
  std::vector<std::vector<int64_t>> h(parts.size(), std::vector<int64_t>(classes, 0));
  for (size_t r = 0; r < parts.size(); ++r) {
    for (int64_t i : parts[r]) ++h[r][labels[i]];
  }
  return h;
}

HeldOut HoldOut(int64_t n, int64_t held, uint64_t seed) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  held = std::clamp<int64_t>(held, 0, n);
  std::mt19937_64 rng(seed * 7919 + 104729);  // apart from the split's draws
  for (int64_t i = 0; i < held; ++i) {        // the first `held` of a seeded shuffle
    std::swap(all[i], all[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i))]);
  }
  HeldOut out;
  out.held.assign(all.begin(), all.begin() + held);
  out.rest.assign(all.begin() + held, all.end());
  std::sort(out.held.begin(), out.held.end());
  std::sort(out.rest.begin(), out.rest.end());
  return out;
}

}  // namespace hetps
