#include "worker/train/straggler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace hetps {
namespace {

std::vector<double> Factors(const std::string& spec, uint64_t seed, int rank, int n) {
  auto s = MakeStraggler(spec, seed, rank);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back((*s)->FactorAt(i));
  return out;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

TEST(StragglerProcessTest, NoneAndPersistent) {
  for (double f : Factors("none", 1, 0, 100)) EXPECT_EQ(f, 1.0);
  for (double f : Factors("persistent:factor=2.5", 1, 3, 100)) EXPECT_EQ(f, 2.5);
}

TEST(StragglerProcessTest, TransientIsSeededPerWorkerAndHasItsMeanSlowdown) {
  const std::string spec = "transient:every=20,length=5,factor=3";
  const std::vector<double> a = Factors(spec, 7, 1, 200000);
  EXPECT_EQ(a, Factors(spec, 7, 1, 200000)) << "the same (seed, rank), the same process";
  EXPECT_NE(a, Factors(spec, 7, 2, 200000)) << "another rank, another draw";
  EXPECT_NE(a, Factors(spec, 8, 1, 200000)) << "another seed, another draw";
  for (double f : a) EXPECT_TRUE(f == 1.0 || f == 3.0);
  // (every + length * factor) / (every + length) = (20 + 15) / 25
  EXPECT_NEAR(Mean(a), 35.0 / 25.0, 0.02);
  // Slow periods last `length` iterations on average.
  int periods = 0, slow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 3.0) ++slow;
    if (a[i] == 3.0 && (i == 0 || a[i - 1] == 1.0)) ++periods;
  }
  ASSERT_GT(periods, 1000);
  EXPECT_NEAR(static_cast<double>(slow) / periods, 5.0, 0.3);
}

TEST(StragglerProcessTest, TransientStartedLateContinuesTheSameProcess) {
  const std::string spec = "transient:every=10,length=3,factor=2";
  const std::vector<double> all = Factors(spec, 3, 0, 500);
  auto late = MakeStraggler(spec, 3, 0);
  ASSERT_TRUE(late.ok());
  for (int i = 250; i < 500; ++i) EXPECT_EQ((*late)->FactorAt(i), all[i]) << i;
}

TEST(StragglerProcessTest, HeterogeneousSpeedsFollowTheirDistribution) {
  const double spread = 0.5;
  std::vector<double> per_worker;
  for (int rank = 0; rank < 20000; ++rank) {
    const std::vector<double> f = Factors("heterogeneous:spread=0.5", 11, rank, 3);
    EXPECT_EQ(f[0], f[2]) << "a worker's speed is persistent";
    EXPECT_GE(f[0], 1.0);
    per_worker.push_back(f[0]);
  }
  // E[exp(s |z|)] = 2 exp(s^2 / 2) Phi(s)
  const double phi = 0.5 * std::erfc(-spread / std::sqrt(2.0));
  EXPECT_NEAR(Mean(per_worker), 2 * std::exp(spread * spread / 2) * phi, 0.01);
}

TEST(StragglerProcessTest, BadSpecsAreRefused) {
  EXPECT_FALSE(MakeStraggler("slow", 1, 0).ok());
  EXPECT_FALSE(MakeStraggler("persistent:factor=0.5", 1, 0).ok());
  EXPECT_FALSE(MakeStraggler("transient:every=0", 1, 0).ok());
  EXPECT_FALSE(MakeStraggler("transient:length=x", 1, 0).ok());
  EXPECT_FALSE(MakeStraggler("heterogeneous:spread=-1", 1, 0).ok());
}

}  // namespace
}  // namespace hetps
