#include "worker/edge/local_training.h"

#include <gtest/gtest.h>

#include <random>

namespace hetps {
namespace {

class LocalTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto arch = Resolve({4, 1, 1}, 3, MlpLayers({5}, 3));
    ASSERT_TRUE(arch.ok()) << arch.status().ToString();
    model_ = MakeCpuModel(std::move(*arch));
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal;
    shard_.size = 8;
    shard_.features = 4;
    shard_.classes = 3;
    for (int i = 0; i < 8 * 4; ++i) shard_.x.push_back(normal(rng));
    for (int i = 0; i < 8; ++i) shard_.y.push_back(i % 3);
    start_ = model_->Init(2);
    grads_ = model_->Zeros();
  }
  // w - lr * (gradient of the whole shard at w + mu * (w - start)).
  Params FullBatchStep(const Params& w, float lr, float mu) {
    Params g = model_->Zeros(), out = w;
    EXPECT_TRUE(model_->LossAndGradients(w, shard_.x.data(), shard_.y.data(), 8, g).ok());
    for (size_t t = 0; t < w.size(); ++t) {
      for (size_t i = 0; i < w[t].size(); ++i) {
        out[t][i] = w[t][i] - lr * (g[t][i] + mu * (w[t][i] - start_[t][i]));
      }
    }
    return out;
  }
  void ExpectNear(const Params& a, const Params& b) {
    for (size_t t = 0; t < a.size(); ++t) {
      for (size_t i = 0; i < a[t].size(); ++i) EXPECT_NEAR(a[t][i], b[t][i], 1e-6) << t << " " << i;
    }
  }
  std::unique_ptr<Model> model_;
  Dataset shard_;
  Params start_, grads_;
};

TEST_F(LocalTrainingTest, OneFullBatchEpochIsOneGradientStep) {
  Params w = start_;
  std::mt19937_64 rng(1);
  auto loss =
      TrainLocally(*model_, shard_, {.epochs = 1, .batch = 8, .lr = 0.1}, start_, w, grads_, rng);
  ASSERT_TRUE(loss.ok());
  EXPECT_GT(*loss, 0);
  ExpectNear(w, FullBatchStep(start_, 0.1f, 0));
}

TEST_F(LocalTrainingTest, ProximalTermPullsLaterStepsTowardTheStart) {
  Params w = start_;
  std::mt19937_64 rng(1);
  ASSERT_TRUE(TrainLocally(*model_, shard_, {.epochs = 2, .batch = 8, .lr = 0.1, .prox_mu = 0.5},
                           start_, w, grads_, rng)
                  .ok());
  // First step: w == start, no pull; second: the proximal gradient mu * (w1 - start) joins.
  ExpectNear(w, FullBatchStep(FullBatchStep(start_, 0.1f, 0.5f), 0.1f, 0.5f));
  Params plain = start_;
  std::mt19937_64 rng2(1);
  ASSERT_TRUE(TrainLocally(*model_, shard_, {.epochs = 2, .batch = 8, .lr = 0.1}, start_, plain,
                           grads_, rng2)
                  .ok());
  double moved_prox = 0, moved_plain = 0;
  for (size_t t = 0; t < w.size(); ++t) {
    for (size_t i = 0; i < w[t].size(); ++i) {
      moved_prox += std::abs(w[t][i] - start_[t][i]);
      moved_plain += std::abs(plain[t][i] - start_[t][i]);
    }
  }
  EXPECT_LT(moved_prox, moved_plain);
}

TEST_F(LocalTrainingTest, SmallBatchesAreSeededAndAnEmptyShardChangesNothing) {
  Params a = start_, b = start_;
  std::mt19937_64 ra(9), rb(9);
  ASSERT_TRUE(
      TrainLocally(*model_, shard_, {.epochs = 3, .batch = 3, .lr = 0.05}, start_, a, grads_, ra)
          .ok());
  ASSERT_TRUE(
      TrainLocally(*model_, shard_, {.epochs = 3, .batch = 3, .lr = 0.05}, start_, b, grads_, rb)
          .ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, start_);
  Dataset empty;
  empty.features = 4;
  Params c = start_;
  auto loss =
      TrainLocally(*model_, empty, {.epochs = 2, .batch = 3, .lr = 0.05}, start_, c, grads_, ra);
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(*loss, 0);
  EXPECT_EQ(c, start_);
}

}  // namespace
}  // namespace hetps
