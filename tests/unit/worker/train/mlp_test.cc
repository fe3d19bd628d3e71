#include "worker/train/mlp.h"

#include <gtest/gtest.h>

#include <random>

namespace hetps {
namespace {

TEST(MlpTest, OneTensorPerWeightAndBiasWithItsLayer) {
  Mlp m({784, 256, 128, 10});
  auto t = m.Tensors();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].name, "fc0.w");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(t[5].name, "fc2.b");
  EXPECT_EQ(t[5].shape, (std::vector<int64_t>{10}));
  EXPECT_EQ(t[4].layer, 2);
}

TEST(MlpTest, GradientsMatchFiniteDifferences) {
  Mlp m({6, 5, 4, 3});
  Params p = m.Init(11);
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  for (auto& b : p) {
    for (float& v : b) v += 0.1f * d(rng);  // non-zero biases too
  }
  const int batch = 4;
  std::vector<float> x(batch * 6);
  for (float& v : x) v = d(rng);
  std::vector<int32_t> y = {0, 2, 1, 2};
  Params g = m.Zeros(), scratch = m.Zeros();
  m.LossAndGradients(p, x.data(), y.data(), batch, g);
  const float eps = 1e-2f;
  int checked = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    for (size_t i = 0; i < p[t].size(); ++i) {
      const float keep = p[t][i];
      p[t][i] = keep + eps;
      const double up = m.LossAndGradients(p, x.data(), y.data(), batch, scratch);
      p[t][i] = keep - eps;
      const double down = m.LossAndGradients(p, x.data(), y.data(), batch, scratch);
      p[t][i] = keep;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(g[t][i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << "tensor " << t << " [" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
}

TEST(MlpTest, SgdLearnsASeparableProblem) {
  Mlp m({2, 8, 2});
  Params p = m.Init(3), g = m.Zeros();
  std::mt19937 rng(9);
  std::normal_distribution<float> d;
  const int n = 256;
  std::vector<float> x(2 * n);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    x[2 * i] = d(rng);
    x[2 * i + 1] = d(rng);
    y[i] = x[2 * i] + x[2 * i + 1] > 0 ? 1 : 0;
  }
  const double before = m.LossAndGradients(p, x.data(), y.data(), n, g);
  for (int step = 0; step < 300; ++step) {
    m.LossAndGradients(p, x.data(), y.data(), n, g);
    for (size_t t = 0; t < p.size(); ++t) {
      for (size_t i = 0; i < p[t].size(); ++i) p[t][i] -= 0.5f * g[t][i];
    }
  }
  EXPECT_LT(m.LossAndGradients(p, x.data(), y.data(), n, g), 0.3 * before);
  EXPECT_GT(m.Accuracy(p, x.data(), y.data(), n), 0.95);
}

}  // namespace
}  // namespace hetps
