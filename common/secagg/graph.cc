#include "common/secagg/graph.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace hetps::secagg {

double BinomialBelow(int k, double p, int t) {
  double sum = 0;
  for (int i = 0; i < std::min(t, k + 1); ++i) {
    const double log_term = std::lgamma(k + 1.0) - std::lgamma(i + 1.0) - std::lgamma(k - i + 1.0) +
                            i * std::log(p) + (k - i) * std::log1p(-p);
    sum += std::exp(log_term);
  }
  return std::min(1.0, sum);
}

int LeastNeighbours(int n) {
  const int k = 3 * static_cast<int>(std::ceil(std::log2(std::max(2, n))));
  return k + k % 2;
}

GraphParams ChooseParams(int n, double dropout, double failure) {
  const int complete = std::max(0, n - 1);
  const double alive = std::clamp(1.0 - dropout, 1e-9, 1.0);
  for (int k = LeastNeighbours(n); k < std::min(complete, kMaxNeighbours); k += 2) {
    const int t = Threshold(k);
    if (n * BinomialBelow(k, alive, t) <= failure) return {k, t};
  }
  const int k = std::min(complete, kMaxNeighbours);
  return {k, Threshold(k)};
}

std::map<int32_t, std::vector<int32_t>> Neighbours(std::vector<int32_t> members, int k,
                                                   uint64_t seed) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  const int n = static_cast<int>(members.size());
  std::map<int32_t, std::vector<int32_t>> out;
  if (k >= n - 1) {
    for (int32_t u : members) {
      for (int32_t v : members) {
        if (v != u) out[u].push_back(v);
      }
      out[u];  // a round of one client: no neighbours
    }
    return out;
  }
  std::vector<int32_t> ring = members;
  std::mt19937_64 rng(seed);
  std::shuffle(ring.begin(), ring.end(), rng);
  for (int i = 0; i < n; ++i) {
    std::set<int32_t> near;
    for (int d = 1; d <= k / 2; ++d) {
      near.insert(ring[(i + d) % n]);
      near.insert(ring[(i - d + n) % n]);
    }
    out[ring[i]].assign(near.begin(), near.end());
  }
  return out;
}

int Threshold(int k) { return (k + 1) / 2 + 1; }

uint8_t SharePoint(const std::vector<int32_t>& owner_neighbours, int32_t owner, int32_t v) {
  if (v == owner) return static_cast<uint8_t>(owner_neighbours.size() + 1);
  auto it = std::lower_bound(owner_neighbours.begin(), owner_neighbours.end(), v);
  if (it == owner_neighbours.end() || *it != v) return 0;
  return static_cast<uint8_t>(1 + (it - owner_neighbours.begin()));
}

}  // namespace hetps::secagg
