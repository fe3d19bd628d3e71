// Criteo-shaped click data, generated (no click log can be downloaded here) and streamed: each
// sample has 26 categorical ids, one per field, Zipf-distributed over `ids_per_field` ids
// (common/zipf.h), and 13 numeric features (log of a log-normal, centred). Its label is drawn
// from a hidden teacher: a factorization machine over the same ids (a bias and 4 factors per id,
// pure functions of the id and the seed, shrinking with the id's rank, as popular ids carry a
// click log's signal) plus a linear term in the numeric features. So the best achievable AUC is
// known: the teacher's own probabilities' AUC on the test set.
//
// Ids of field f (0-based) are (f + 1) << 40 | rank, so the fields never share an id. Samples
// are drawn from the caller's generator: every worker streams its own (seeded by its rank), and
// the test set is one more seeded draw.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/zipf.h"

namespace hetps {

inline constexpr int kCtrFields = 26;
inline constexpr int kCtrDense = 13;

struct CtrBatch {
  int n = 0;
  std::vector<uint64_t> ids;    // n x kCtrFields, sample-major
  std::vector<float> dense;     // n x kCtrDense
  std::vector<float> labels;    // 0 or 1
  std::vector<double> teacher;  // the teacher's click probability
};

class CtrData {
 public:
  CtrData(uint64_t ids_per_field, double zipf, uint64_t seed);
  // Draws `n` samples into `out`.
  void Draw(std::mt19937_64& rng, int n, CtrBatch& out) const;
  // The teacher's logit of one sample.
  double TeacherLogit(const uint64_t* ids, const float* dense) const;

 private:
  ZipfSampler ranks_;
  uint64_t seed_;
  double dense_weights_[kCtrDense];
};

// The area under the ROC curve of `scores` against 0/1 `labels` (ties count half).
double Auc(const std::vector<float>& labels, const std::vector<double>& scores);
// The mean logistic loss of probabilities `p`.
double LogLoss(const std::vector<float>& labels, const std::vector<double>& p);

}  // namespace hetps
