#include "worker/ctr/ctr_data.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/mix.h"

namespace hetps {
namespace {

// The k-th standard normal of `key` under `salt`: a pure function of the three (Box-Muller
// over two mixed words).
double Normal(uint64_t key, uint64_t salt, int k) {
  const uint64_t base = Mix64(key ^ salt) + 0x9e3779b97f4a7c15ULL * (2 * k + 1);
  const double u1 = UnitOf(Mix64(base)), u2 = UnitOf(Mix64(base ^ 0xd1b54a32d192ed03ULL));
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

}  // namespace

CtrData::CtrData(uint64_t ids_per_field, double zipf, uint64_t seed)
    : ranks_(ids_per_field, zipf), seed_(seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> weight(0, 0.3);
  for (double& w : dense_weights_) w = weight(rng);
}

double CtrData::TeacherLogit(const uint64_t* ids, const float* dense) const {
  constexpr int kFactors = 4;
  double bias = 0, sum[kFactors] = {}, squares = 0;
  for (int f = 0; f < kCtrFields; ++f) {
    const double rank = static_cast<double>(ids[f] & ((uint64_t{1} << 40) - 1));
    const double scale = 1 / std::sqrt(1 + rank / 50);
    bias += Normal(ids[f], seed_, 0) * 0.7 * scale;
    for (int k = 0; k < kFactors; ++k) {
      const double v = Normal(ids[f], seed_ + 1, k) * 0.2 * scale;
      sum[k] += v;
      squares += v * v;
    }
  }
  double pairs = -squares;
  for (double s : sum) pairs += s * s;
  double linear = 0;
  for (int d = 0; d < kCtrDense; ++d) linear += dense[d] * dense_weights_[d];
  return -1.0 + bias + 0.5 * pairs + linear;
}

void CtrData::Draw(std::mt19937_64& rng, int n, CtrBatch& out) const {
  out.n = n;
  out.ids.resize(static_cast<size_t>(n) * kCtrFields);
  out.dense.resize(static_cast<size_t>(n) * kCtrDense);
  out.labels.resize(n);
  out.teacher.resize(n);
  std::lognormal_distribution<double> numeric(0, 1);
  std::uniform_real_distribution<double> coin(0, 1);
  for (int i = 0; i < n; ++i) {
    uint64_t* ids = &out.ids[static_cast<size_t>(i) * kCtrFields];
    float* dense = &out.dense[static_cast<size_t>(i) * kCtrDense];
    for (int f = 0; f < kCtrFields; ++f) ids[f] = (uint64_t{1} + f) << 40 | ranks_(rng);
    for (int d = 0; d < kCtrDense; ++d) {
      dense[d] = static_cast<float>(std::log1p(numeric(rng)) - 0.8);
    }
    const double p = 1 / (1 + std::exp(-TeacherLogit(ids, dense)));
    out.teacher[i] = p;
    out.labels[i] = coin(rng) < p ? 1.0f : 0.0f;
  }
}

double Auc(const std::vector<float>& labels, const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_ranks = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;  // a run of tied scores shares the mean of its ranks
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (i + 1 + j) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_ranks += rank;
        ++positives;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

double LogLoss(const std::vector<float>& labels, const std::vector<double>& p) {
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(p[i], 1e-7, 1 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
  }
  return p.empty() ? 0 : sum / static_cast<double>(p.size());
}

}  // namespace hetps
