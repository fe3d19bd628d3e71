// The CTR workload's parts (worker/ctr/): the model's gradients against finite differences, AUC
// on cases worked by hand, and the generated data's determinism and learnable signal.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "worker/ctr/ctr_data.h"
#include "worker/ctr/ctr_model.h"

namespace hetps {
namespace {

TEST(CtrTest, AucCountsOrderedPairsAndTiesHalf) {
  EXPECT_DOUBLE_EQ(Auc({0, 0, 1, 1}, {0.1, 0.4, 0.35, 0.8}), 0.75);
  EXPECT_DOUBLE_EQ(Auc({0, 1}, {0.5, 0.5}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({1, 0, 1}, {0.9, 0.1, 0.8}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({1, 1}, {0.1, 0.2}), 0.5);  // no negatives: undefined, reported as chance
  EXPECT_NEAR(LogLoss({1, 0}, {0.5, 0.5}), std::log(2.0), 1e-12);
}

// Loss of the model at `params` and `rows` (its mean over the batch).
double Loss(CtrModel& m, const CtrParams& params, const std::vector<float>& rows,
            const std::vector<float>& dense, const std::vector<float>& labels, int n) {
  CtrParams g;
  std::vector<float> rg;
  return m.Step(params, rows.data(), dense.data(), labels.data(), n, g, rg);
}

TEST(CtrTest, GradientsMatchFiniteDifferences) {
  const int fields = 2, dim = 3, dense_n = 2, hidden = 4, n = 5;
  CtrModel m(fields, dim, dense_n, hidden);
  CtrParams params = m.Init(3);
  for (float& b : params[1]) b = 0.1f;  // every hidden unit active somewhere
  std::mt19937_64 rng(1);
  std::normal_distribution<float> z(0, 1);
  std::vector<float> rows(n * fields * dim), dense(n * dense_n), labels = {1, 0, 1, 1, 0};
  for (float& v : rows) v = z(rng);
  for (float& v : dense) v = z(rng);
  CtrParams grads;
  std::vector<float> row_grads;
  m.Step(params, rows.data(), dense.data(), labels.data(), n, grads, row_grads);
  const float h = 1e-2f;
  auto check = [&](float& x, float analytic, const char* what) {
    const float keep = x;
    x = keep + h;
    const double up = Loss(m, params, rows, dense, labels, n);
    x = keep - h;
    const double down = Loss(m, params, rows, dense, labels, n);
    x = keep;
    EXPECT_NEAR((up - down) / (2 * h), analytic, 2e-3) << what;
  };
  for (size_t t = 0; t < params.size(); ++t) {
    for (size_t i = 0; i < params[t].size(); i += 3) check(params[t][i], grads[t][i], "param");
  }
  for (size_t i = 0; i < rows.size(); ++i) check(rows[i], row_grads[i], "row");
}

TEST(CtrTest, DataIsSeededAndItsTeacherIsLearnable) {
  CtrData data(1000000, 1.05, 7);
  CtrBatch a, b;
  std::mt19937_64 r1(5), r2(5);
  data.Draw(r1, 4000, a);
  data.Draw(r2, 4000, b);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  for (int f = 0; f < kCtrFields; ++f) EXPECT_EQ(a.ids[f] >> 40, static_cast<uint64_t>(f + 1));
  const double teacher = Auc(a.labels, a.teacher);
  EXPECT_GT(teacher, 0.85);
  double clicks = 0;
  for (float y : a.labels) clicks += y;
  EXPECT_GT(clicks / a.n, 0.2);
  EXPECT_LT(clicks / a.n, 0.6);
}

}  // namespace
}  // namespace hetps
