#include "scheduler/selection/fedlesscan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace hetps {

namespace {

// Exponential moving average over a series, oldest first: e = alpha x + (1 - alpha) e.
template <typename T, typename F>
double Ema(const std::vector<T>& series, double alpha, F value) {
  double e = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const double x = value(series[i]);
    e = i == 0 ? x : alpha * x + (1 - alpha) * e;
  }
  return e;
}

}  // namespace

std::vector<std::array<double, 2>> FedLesScanFeatures(
    const std::vector<const ClientRecord*>& clients, int64_t round) {
  std::vector<std::array<double, 2>> f(clients.size());
  double max_time = 0;
  for (size_t i = 0; i < clients.size(); ++i) {
    f[i][0] = Ema(clients[i]->train_s, 0.5, [](double t) { return t; });
    max_time = std::max(max_time, f[i][0]);
  }
  const double r = static_cast<double>(std::max<int64_t>(round, 1));
  for (size_t i = 0; i < clients.size(); ++i) {
    const double misses = Ema(clients[i]->missed_rounds, 0.8,
                              [r](int64_t m) { return (static_cast<double>(m) + 1) / r; });
    f[i][1] = 1.5 * max_time * misses;
  }
  return f;
}

std::vector<int> Dbscan(const std::vector<std::array<double, 2>>& points, double eps,
                        int min_samples) {
  const int n = static_cast<int>(points.size());
  auto neighbours = [&](int i) {
    std::vector<int> near;
    for (int j = 0; j < n; ++j) {
      const double dx = points[i][0] - points[j][0], dy = points[i][1] - points[j][1];
      if (dx * dx + dy * dy <= eps * eps) near.push_back(j);  // i itself too
    }
    return near;
  };
  constexpr int kUnvisited = -2;
  std::vector<int> label(n, kUnvisited);
  int cluster = 0;
  for (int i = 0; i < n; ++i) {
    if (label[i] != kUnvisited) continue;
    std::vector<int> seeds = neighbours(i);
    if (static_cast<int>(seeds.size()) < min_samples) {
      label[i] = -1;  // noise, unless a core point reaches it later
      continue;
    }
    label[i] = cluster;
    for (size_t k = 0; k < seeds.size(); ++k) {
      const int j = seeds[k];
      if (label[j] == -1) label[j] = cluster;  // a border point
      if (label[j] != kUnvisited) continue;
      label[j] = cluster;
      std::vector<int> more = neighbours(j);
      if (static_cast<int>(more.size()) >= min_samples) {
        seeds.insert(seeds.end(), more.begin(), more.end());
      }
    }
    ++cluster;
  }
  return label;
}

double CalinskiHarabasz(const std::vector<std::array<double, 2>>& points,
                        const std::vector<int>& labels) {
  const size_t n = points.size();
  std::map<int, std::vector<size_t>> members;
  for (size_t i = 0; i < n; ++i) members[labels[i]].push_back(i);
  const size_t k = members.size();
  if (k < 2 || k >= n) return -1;
  std::array<double, 2> mean = {0, 0};
  for (const auto& p : points) {
    mean[0] += p[0] / static_cast<double>(n);
    mean[1] += p[1] / static_cast<double>(n);
  }
  double between = 0, within = 0;
  for (const auto& [label, idx] : members) {
    std::array<double, 2> c = {0, 0};
    for (size_t i : idx) {
      c[0] += points[i][0] / static_cast<double>(idx.size());
      c[1] += points[i][1] / static_cast<double>(idx.size());
    }
    between += static_cast<double>(idx.size()) *
               ((c[0] - mean[0]) * (c[0] - mean[0]) + (c[1] - mean[1]) * (c[1] - mean[1]));
    for (size_t i : idx) {
      within += (points[i][0] - c[0]) * (points[i][0] - c[0]) +
                (points[i][1] - c[1]) * (points[i][1] - c[1]);
    }
  }
  if (within <= 0) return std::numeric_limits<double>::infinity();
  return (between / static_cast<double>(k - 1)) / (within / static_cast<double>(n - k));
}

std::vector<int> FedLesScanClusters(const std::vector<std::array<double, 2>>& features) {
  const size_t n = features.size();
  // Standardised: each feature to mean 0, deviation 1 (a constant feature stays 0).
  std::vector<std::array<double, 2>> z = features;
  for (int d = 0; d < 2; ++d) {
    double mean = 0, var = 0;
    for (const auto& f : features) mean += f[d] / static_cast<double>(n);
    for (const auto& f : features) var += (f[d] - mean) * (f[d] - mean) / static_cast<double>(n);
    const double sd = std::sqrt(var);
    for (auto& p : z) p[d] = sd > 0 ? (p[d] - mean) / sd : 0;
  }
  std::vector<int> best(n, 0);
  double best_score = -1;
  for (double eps = 0.01; eps < 2.0; eps += 0.1) {
    std::vector<int> labels = Dbscan(z, eps, 2);
    const double score = CalinskiHarabasz(z, labels);
    if (score > best_score) {
      best_score = score;
      best = std::move(labels);
    }
  }
  return best;
}

namespace {

class FedLesScan final : public SelectionPolicy {
 public:
  std::vector<int32_t> Select(const std::vector<const ClientRecord*>& idle, int count,
                              int64_t round, int64_t total_rounds, std::mt19937_64&) override {
    std::vector<const ClientRecord*> sorted = idle;  // by rank: independent of arrival order
    SortByRank(sorted);
    std::vector<int32_t> picked;
    std::vector<const ClientRecord*> rested, backing_off;
    for (const ClientRecord* c : sorted) {
      if (c->selected == 0) {
        if (static_cast<int>(picked.size()) < count) picked.push_back(c->id);  // rookies first
      } else if (InBackoff(*c, round)) {
        backing_off.push_back(c);
      } else {
        rested.push_back(c);
      }
    }
    if (static_cast<int>(picked.size()) < count && !rested.empty()) {
      for (int32_t id :
           FromClusters(rested, count - static_cast<int>(picked.size()), round, total_rounds)) {
        picked.push_back(id);
      }
    }
    // Clients in backoff only fill what is left, those that missed least recently first.
    std::stable_sort(backing_off.begin(), backing_off.end(),
                     [](const ClientRecord* a, const ClientRecord* b) {
                       return a->last_missed < b->last_missed;
                     });
    for (const ClientRecord* c : backing_off) {
      if (static_cast<int>(picked.size()) >= count) break;
      picked.push_back(c->id);
    }
    return picked;
  }

 private:
  // Backs off for 2^(consecutive misses - 1) rounds after its last miss, at most 8.
  static bool InBackoff(const ClientRecord& c, int64_t round) {
    if (c.consecutive_missed == 0 || c.last_missed < 0) return false;
    const int64_t backoff =
        std::min<int64_t>(int64_t{1} << std::min<int64_t>(c.consecutive_missed - 1, 3), 8);
    return c.last_missed + backoff >= round;
  }

  static std::vector<int32_t> FromClusters(const std::vector<const ClientRecord*>& clients,
                                           int count, int64_t round, int64_t total_rounds) {
    const auto features = FedLesScanFeatures(clients, round);
    const std::vector<int> labels = FedLesScanClusters(features);
    // Clusters in the order of their mean score (training time plus the miss penalty).
    std::map<int, std::vector<size_t>> members;
    for (size_t i = 0; i < clients.size(); ++i) members[labels[i]].push_back(i);
    std::vector<std::pair<double, std::vector<size_t>>> clusters;
    for (auto& [label, idx] : members) {
      double score = 0;
      for (size_t i : idx)
        score += (features[i][0] + features[i][1]) / static_cast<double>(idx.size());
      clusters.push_back({score, std::move(idx)});
    }
    std::stable_sort(clusters.begin(), clusters.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    // Start at the cluster whose rank matches the run's progress, wrap around.
    const double progress =
        total_rounds > 0 ? std::clamp(static_cast<double>(round) / total_rounds, 0.0, 1.0) : 0.0;
    const size_t start =
        std::min(clusters.size() - 1, static_cast<size_t>(progress * clusters.size()));
    std::vector<int32_t> picked;
    for (size_t k = 0; k < clusters.size() && static_cast<int>(picked.size()) < count; ++k) {
      std::vector<size_t> idx = clusters[(start + k) % clusters.size()].second;
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {  // least used first
        return clients[a]->selected < clients[b]->selected;
      });
      for (size_t i : idx) {
        if (static_cast<int>(picked.size()) >= count) break;
        picked.push_back(clients[i]->id);
      }
    }
    return picked;
  }
};

}  // namespace

void RegisterFedLesScan(SelectionRegistry& r) {
  r.Add({"fedlesscan",
         "rookies first; clients that missed back off; the rest clustered (DBSCAN) by training "
         "time and missed rounds, taken least-used first from the cluster matching the run's "
         "progress (Elzohairy et al., BigData'22)",
         {}},
        {[](const AlgorithmSpec&) { return std::make_unique<FedLesScan>(); }});
}

}  // namespace hetps
