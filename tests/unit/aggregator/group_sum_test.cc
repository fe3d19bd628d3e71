// GroupSum: the host-local aggregator's open sums (aggregator/group_sum.h).
#include "aggregator/group_sum.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/cluster_view.h"
#include "common/tier.h"

namespace hetps {
namespace {

proto::Header PushOf(int32_t worker, int32_t partition, int64_t clock, int64_t seq,
                     double weight = 0) {
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_sender(worker);
  h.set_partition(partition);
  h.set_clock(clock);
  h.set_version(10 + clock);
  h.set_rank(partition % 2);
  h.set_incarnation(1000 + static_cast<uint64_t>(worker));
  h.set_seq(seq);
  h.set_request_id(100 * static_cast<uint64_t>(worker) + static_cast<uint64_t>(seq));
  if (weight > 0) h.set_weight(weight);
  return h;
}

GroupSum::Options Group(std::vector<int32_t> workers, bool by_clock, double wait_s = 1.0) {
  GroupSum::Options o;
  o.group = std::move(workers);
  o.by_clock = by_clock;
  o.wait_s = wait_s;
  return o;
}

TEST(GroupSumTest, ASumLeavesOnceEveryWorkerOfTheGroupIsInItWithTheirContributions) {
  GroupSum sums(Group({3, 5, 7}, /*by_clock=*/true));
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c = {100, 200, 300};
  auto r = sums.Add(PushOf(3, 0, 4, 1, 2.0), "w3", a, 0.0);
  ASSERT_TRUE(r.ok() && r->empty());
  r = sums.Add(PushOf(7, 0, 4, 9), "w7", c, 0.1);
  ASSERT_TRUE(r.ok() && r->empty());
  EXPECT_EQ(sums.open(), 1u);
  r = sums.Add(PushOf(5, 0, 4, 2, 3.0), "w5", b, 0.2);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  const GroupSum::Sum& s = r->front();
  EXPECT_EQ(s.values, (std::vector<float>{111, 222, 333}));
  EXPECT_EQ(s.partition, 0);
  EXPECT_EQ(s.clock, 4);
  EXPECT_EQ(s.base_version, 14);
  EXPECT_DOUBLE_EQ(s.weight, 2.0 + 3.0 + 1.0);  // an unweighted push counts one sample
  ASSERT_EQ(s.contributions.size(), 3u);
  EXPECT_EQ(s.contributions[1].worker(), 7);
  EXPECT_EQ(s.contributions[1].incarnation(), 1007u);
  EXPECT_EQ(s.contributions[1].seq(), 9);
  ASSERT_EQ(s.waiters.size(), 3u);
  EXPECT_EQ(s.waiters[2].identity, "w5");
  EXPECT_EQ(s.waiters[2].request_id, 502u);
  EXPECT_EQ(sums.open(), 0u);
}

TEST(GroupSumTest, SynchronousSumsArePerClockAndAWorkersSecondPushOpensTheNextSum) {
  GroupSum sums(Group({1, 2}, /*by_clock=*/true));
  const std::vector<float> one = {1}, two = {2};
  ASSERT_TRUE(sums.Add(PushOf(1, 0, 0, 1), "w1", one, 0).ok());
  ASSERT_TRUE(sums.Add(PushOf(1, 0, 1, 2), "w1", two, 0).ok());  // another clock: its own sum
  ASSERT_TRUE(sums.Add(PushOf(1, 0, 1, 3), "w1", two, 0).ok());  // same clock again: queued
  EXPECT_EQ(sums.open(), 3u);
  auto r = sums.Add(PushOf(2, 0, 1, 1), "w2", one, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().values, std::vector<float>{3});
  EXPECT_EQ(r->front().contributions[0].seq(), 2);  // the worker's first push of the clock
  EXPECT_EQ(sums.open(), 2u);
}

TEST(GroupSumTest, AsynchronousSumsTakeAnyClocksAndLeaveWhenTheirWindowEnds) {
  GroupSum sums(Group({1, 2, 3}, /*by_clock=*/false, /*wait_s=*/0.002));
  const std::vector<float> v = {5};
  ASSERT_TRUE(sums.Add(PushOf(1, 2, 7, 1), "w1", v, 1.000).ok());
  ASSERT_TRUE(sums.Add(PushOf(2, 2, 9, 1), "w2", v, 1.001).ok());
  EXPECT_TRUE(sums.Due(1.0015).empty());
  EXPECT_NEAR(sums.NextDue(1.0015), 0.0005, 1e-9);
  auto due = sums.Due(1.002);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].values, std::vector<float>{10});
  EXPECT_EQ(due[0].clock, 7);  // the oldest clock of the pushes it holds
  EXPECT_EQ(due[0].contributions.size(), 2u);
  EXPECT_LT(sums.NextDue(1.003), 0);  // nothing open
}

TEST(GroupSumTest, AGoneWorkerIsNoLongerWaitedFor) {
  GroupSum sums(Group({1, 2, 3}, /*by_clock=*/true));
  const std::vector<float> v = {1, 1};
  ASSERT_TRUE(sums.Add(PushOf(1, 0, 0, 1), "w1", v, 0).ok());
  ASSERT_TRUE(sums.Add(PushOf(2, 0, 0, 1), "w2", v, 0).ok());
  auto done = sums.Forget(3);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].values, (std::vector<float>{2, 2}));
  auto refused = sums.Add(PushOf(3, 0, 1, 2), "w3", v, 0);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

TEST(GroupSumTest, BadPushesAreRefusedAndChangeNothing) {
  GroupSum::Options o = Group({1, 2}, /*by_clock=*/true);
  o.max_open = 1;
  GroupSum sums(o);
  const std::vector<float> two = {1, 2}, three = {1, 2, 3};
  EXPECT_EQ(sums.Add(PushOf(9, 0, 0, 1), "w9", two, 0).status().code(),
            StatusCode::kFailedPrecondition);  // not in the group
  proto::Header unnumbered = PushOf(1, 0, 0, 1);
  unnumbered.set_seq(0);
  EXPECT_EQ(sums.Add(unnumbered, "w1", two, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sums.Add(PushOf(1, 0, 0, 1), "w1", {}, 0).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(sums.Add(PushOf(1, 0, 0, 1), "w1", two, 0).ok());
  EXPECT_EQ(sums.Add(PushOf(2, 0, 0, 1), "w2", three, 0).status().code(),
            StatusCode::kSizeMismatch);
  proto::Header elsewhere = PushOf(2, 0, 0, 1);
  elsewhere.set_rank(1);
  EXPECT_EQ(sums.Add(elsewhere, "w2", two, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sums.Add(PushOf(1, 0, 0, 2), "w1", two, 0).status().code(),
            StatusCode::kUnavailable);  // a second sum would pass max_open
  EXPECT_EQ(sums.open(), 1u);
  auto r = sums.Add(PushOf(2, 0, 0, 1), "w2", two, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().values, (std::vector<float>{2, 4}));
  auto all = sums.TakeAll();
  EXPECT_TRUE(all.empty());
}

TEST(TierTest, WorkersUseAnAggregatorOfTheirHostDealtOutByRank) {
  proto::ClusterView v;
  auto add = [&](int32_t id, proto::Role role, int32_t rank, const std::string& host) {
    proto::NodeInfo& n = *v.add_nodes();
    n.set_id(id);
    n.set_role(role);
    n.set_rank(rank);
    n.set_host(host);
  };
  add(1, proto::SERVER, 0, "a");
  for (int i = 0; i < 4; ++i) add(2 + i, proto::WORKER, i, i < 3 ? "a" : "b");
  add(6, proto::AGGREGATOR, 0, "a");
  add(7, proto::AGGREGATOR, 1, "a");
  const ClusterView view(v);
  EXPECT_EQ(AggregatorOf(view, 2), 6);  // rank 0 on a: the first of a's two
  EXPECT_EQ(AggregatorOf(view, 3), 7);
  EXPECT_EQ(AggregatorOf(view, 4), 6);
  EXPECT_EQ(AggregatorOf(view, 5), -1);  // host b has none
  EXPECT_EQ(AggregatorOf(view, 1), -1);  // not a worker
  EXPECT_EQ(GroupOf(view, 6), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(GroupOf(view, 7), (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace hetps
