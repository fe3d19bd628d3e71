#include "worker/train/partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace hetps {
namespace {

void ExpectCoverage(const std::vector<std::vector<int64_t>>& parts, int64_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& p : parts) {
    for (int64_t i : p) ++seen[i];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
}

std::vector<int32_t> Labels(int64_t n, int classes) {
  std::vector<int32_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(i % classes);
  return y;
}

// Mean over workers of the largest class share in its data.
double MeanTopShare(const std::vector<std::vector<int64_t>>& h) {
  double sum = 0;
  for (const auto& row : h) {
    const int64_t total = std::accumulate(row.begin(), row.end(), int64_t{0});
    if (total > 0) sum += static_cast<double>(*std::max_element(row.begin(), row.end())) / total;
  }
  return sum / static_cast<double>(h.size());
}

TEST(PartitionerTest, IidCoversEverySampleOnceInNearEqualParts) {
  auto parts = PartitionIid(1003, 4, 7);
  ExpectCoverage(parts, 1003);
  for (const auto& p : parts) EXPECT_NEAR(static_cast<double>(p.size()), 1003 / 4.0, 1);
  EXPECT_EQ(parts, PartitionIid(1003, 4, 7));  // seeded: every worker computes the same
  EXPECT_NE(parts, PartitionIid(1003, 4, 8));
}

TEST(PartitionerTest, DirichletCoversEverySampleOnce) {
  auto y = Labels(5000, 10);
  for (double alpha : {0.05, 1.0, 100.0}) {
    ExpectCoverage(PartitionDirichlet(y, 10, 6, alpha, 3), 5000);
  }
  EXPECT_EQ(PartitionDirichlet(y, 10, 6, 0.5, 3), PartitionDirichlet(y, 10, 6, 0.5, 3));
}

TEST(PartitionerTest, SmallerAlphaSkewsLabelsMore) {
  auto y = Labels(20000, 10);
  const double skewed = MeanTopShare(LabelHistogram(PartitionDirichlet(y, 10, 8, 0.1, 1), y, 10));
  const double mild = MeanTopShare(LabelHistogram(PartitionDirichlet(y, 10, 8, 1.0, 1), y, 10));
  const double even = MeanTopShare(LabelHistogram(PartitionDirichlet(y, 10, 8, 1000, 1), y, 10));
  EXPECT_GT(skewed, 0.5);  // most of a worker's data is one class
  EXPECT_GT(skewed, mild);
  EXPECT_GT(mild, even);
  EXPECT_LT(even, 0.13);  // close to the iid 0.1
}

TEST(PartitionerTest, ShardsCoverEverySampleAndGiveEachWorkerAtMostPerWorkerClasses) {
  const auto labels = Labels(6000, 10);
  const auto parts = PartitionShards(labels, 100, 2, 3);
  ASSERT_EQ(parts.size(), 100u);
  ExpectCoverage(parts, 6000);
  for (const auto& row : LabelHistogram(parts, labels, 10)) {
    EXPECT_LE(std::count_if(row.begin(), row.end(), [](int64_t c) { return c > 0; }), 2);
    EXPECT_EQ(std::accumulate(row.begin(), row.end(), int64_t{0}), 60);
  }
  EXPECT_EQ(PartitionShards(labels, 100, 2, 3), parts);  // seeded
  EXPECT_NE(PartitionShards(labels, 100, 2, 4), parts);
}

// A validation split: held and rest cover the set once, sorted, the draw seeded and spread
// over the set (not its first samples).
TEST(HoldOutTest, TheSplitIsSeededDisjointAndCoversTheSet) {
  const HeldOut a = HoldOut(1000, 100, 7);
  ASSERT_EQ(a.held.size(), 100u);
  ASSERT_EQ(a.rest.size(), 900u);
  ExpectCoverage({a.held, a.rest}, 1000);
  EXPECT_TRUE(std::is_sorted(a.held.begin(), a.held.end()));
  EXPECT_TRUE(std::is_sorted(a.rest.begin(), a.rest.end()));
  EXPECT_GT(a.held.back(), 500) << "drawn from the whole set";
  EXPECT_EQ(HoldOut(1000, 100, 7).held, a.held);
  EXPECT_NE(HoldOut(1000, 100, 8).held, a.held);
  EXPECT_TRUE(HoldOut(10, 0, 1).held.empty());
  EXPECT_EQ(HoldOut(10, 0, 1).rest.size(), 10u);
}

}  // namespace
}  // namespace hetps
