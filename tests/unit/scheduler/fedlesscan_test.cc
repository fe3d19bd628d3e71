// FedLesScan's selection on synthetic client histories: its clustering, rookies, backoff and
// the progress-driven walk over the clusters.
#include "scheduler/selection/fedlesscan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace hetps {
namespace {

// A client selected `times` times, each training for `train_s`, that missed `missed_rounds`.
ClientRecord Client(int32_t id, double train_s, int times,
                    std::vector<int64_t> missed_rounds = {}) {
  ClientRecord c;
  c.id = id;
  c.selected = times;
  c.train_s.assign(times, train_s);
  c.missed_rounds = std::move(missed_rounds);
  c.missed = static_cast<int64_t>(c.missed_rounds.size());
  c.last_missed = c.missed_rounds.empty() ? -1 : c.missed_rounds.back();
  return c;
}

std::vector<const ClientRecord*> Pointers(const std::vector<ClientRecord>& records) {
  std::vector<const ClientRecord*> p;
  for (const ClientRecord& r : records) p.push_back(&r);
  return p;
}

std::vector<int32_t> Select(const std::vector<ClientRecord>& records, int count, int64_t round,
                            int64_t total) {
  auto policy = MakeSelection("fedlesscan");
  EXPECT_TRUE(policy.ok());
  std::mt19937_64 rng(1);
  return (*policy)->Select(Pointers(records), count, round, total, rng);
}

TEST(FedLesScanTest, DbscanFindsDenseGroupsAndNoise) {
  const std::vector<std::array<double, 2>> points = {{0, 0},   {0.1, 0}, {0, 0.1}, {5, 5},
                                                     {5.1, 5}, {5, 5.1}, {20, 20}};
  const std::vector<int> labels = Dbscan(points, 0.5, 2);
  EXPECT_EQ(labels[0], labels[1]);
  EXPECT_EQ(labels[0], labels[2]);
  EXPECT_EQ(labels[3], labels[4]);
  EXPECT_EQ(labels[3], labels[5]);
  EXPECT_NE(labels[0], labels[3]);
  EXPECT_EQ(labels[6], -1) << "a lone point is noise";
  // Two well-separated groups score far better than an arbitrary split.
  const std::vector<int> arbitrary = {0, 1, 0, 1, 0, 1, 0};
  EXPECT_GT(CalinskiHarabasz(points, labels), 10 * CalinskiHarabasz(points, arbitrary));
  EXPECT_EQ(CalinskiHarabasz(points, std::vector<int>(7, 0)), -1) << "one cluster has no score";
}

TEST(FedLesScanTest, FeaturesAreTheTrainingTimeAndAScaledRecentMissRate) {
  std::vector<ClientRecord> r = {Client(1, 2.0, 3), Client(2, 8.0, 3, {9})};
  r[0].train_s = {4.0, 2.0};  // EMA 0.5: 0.5 * 2 + 0.5 * 4 = 3
  const auto f = FedLesScanFeatures(Pointers(r), 10);
  EXPECT_DOUBLE_EQ(f[0][0], 3.0);
  EXPECT_DOUBLE_EQ(f[0][1], 0.0);
  EXPECT_DOUBLE_EQ(f[1][0], 8.0);
  EXPECT_DOUBLE_EQ(f[1][1], 1.5 * 8.0 * (9 + 1) / 10.0);
}

TEST(FedLesScanTest, FastAndSlowClientsFallIntoSeparateClusters) {
  std::vector<ClientRecord> r;
  for (int i = 0; i < 6; ++i) r.push_back(Client(i, 1.0 + 0.01 * i, 2));
  for (int i = 6; i < 12; ++i) r.push_back(Client(i, 10.0 + 0.01 * i, 2));
  const std::vector<int> labels = FedLesScanClusters(FedLesScanFeatures(Pointers(r), 5));
  for (int i = 1; i < 6; ++i) EXPECT_EQ(labels[i], labels[0]);
  for (int i = 7; i < 12; ++i) EXPECT_EQ(labels[i], labels[6]);
  EXPECT_NE(labels[0], labels[6]);
}

TEST(FedLesScanTest, RookiesFirstThenTheClusterMatchingProgressLeastUsedFirst) {
  std::vector<ClientRecord> r;
  for (int i = 0; i < 6; ++i) r.push_back(Client(i, 1.0 + 0.01 * i, 2 + i));  // fast
  for (int i = 6; i < 12; ++i) r.push_back(Client(i, 10.0 + 0.01 * i, 2));    // slow
  r.push_back(Client(20, 0, 0));                                              // a rookie
  // Early in the run: the rookie, then the fast cluster's least-used clients.
  EXPECT_EQ(Select(r, 3, 1, 100), (std::vector<int32_t>{20, 0, 1}));
  // Late in the run the walk starts at the slow cluster, so slow clients get their turn.
  const std::vector<int32_t> late = Select(r, 3, 90, 100);
  EXPECT_EQ(late[0], 20);
  EXPECT_GE(late[1], 6);
  EXPECT_GE(late[2], 6);
  // More than a cluster holds: it wraps around to the next one.
  const std::vector<int32_t> many = Select(r, 10, 1, 100);
  EXPECT_EQ(std::set<int32_t>(many.begin(), many.end()).size(), 10u);
}

TEST(FedLesScanTest, ClientsThatMissedBackOffUnlessNeededToFill) {
  std::vector<ClientRecord> r;
  for (int i = 0; i < 4; ++i) r.push_back(Client(i, 1.0, 3));
  r[1].missed_rounds = {9};
  r[1].last_missed = 9;
  r[1].consecutive_missed = 1;  // backs off for 1 round: excluded in round 10
  r[2].missed_rounds = {8, 9};
  r[2].last_missed = 9;
  r[2].consecutive_missed = 2;  // backs off for 2 rounds: excluded in rounds 10 and 11
  std::vector<int32_t> round10 = Select(r, 2, 10, 100);
  std::sort(round10.begin(), round10.end());
  EXPECT_EQ(round10, (std::vector<int32_t>{0, 3}));
  std::vector<int32_t> round11 = Select(r, 3, 11, 100);
  std::sort(round11.begin(), round11.end());
  EXPECT_EQ(round11, (std::vector<int32_t>{0, 1, 3})) << "client 1's backoff is over";
  // Short of clients, those in backoff fill the round.
  EXPECT_EQ(Select(r, 4, 10, 100).size(), 4u);
}

}  // namespace
}  // namespace hetps
