#include "scheduler/membership.h"

#include <gtest/gtest.h>

#include "scheduler/join_limiter.h"

namespace hetps {
namespace {

using std::chrono::milliseconds;

proto::Header Reg(proto::Role role, const std::string& address = "") {
  proto::Header h;
  h.set_type(proto::REGISTER);
  h.set_role(role);
  h.set_address(address);
  return h;
}

TEST(MembershipTest, AssignsIdsAndPerRoleRanks) {
  Membership m(2, 2, 2);
  SteadyTime t0{};
  auto w0 = m.Register("a", Reg(proto::WORKER), t0);
  auto s0 = m.Register("b", Reg(proto::SERVER, "tcp://h:1"), t0);
  auto w1 = m.Register("c", Reg(proto::WORKER), t0);
  ASSERT_TRUE(w0.ok() && s0.ok() && w1.ok());
  EXPECT_EQ((*w0)->info.id(), 1);
  EXPECT_EQ((*s0)->info.id(), 2);
  EXPECT_EQ((*w1)->info.rank(), 1);
  EXPECT_EQ((*s0)->info.rank(), 0);
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.Register("d", Reg(proto::SERVER, "tcp://h:2"), t0).ok());
  EXPECT_TRUE(m.complete());
  EXPECT_EQ(m.View().nodes_size(), 4);
}

TEST(MembershipTest, RetriedRegistrationKeepsItsId) {
  Membership m(1, 1, 1);
  auto a = m.Register("a", Reg(proto::WORKER), {});
  auto again = m.Register("a", Reg(proto::WORKER), {});
  ASSERT_TRUE(a.ok() && again.ok());
  EXPECT_EQ((*a)->info.id(), (*again)->info.id());
}

TEST(MembershipTest, RefusesExtraNodesAndBadRequests) {
  Membership m(1, 1, 1);
  ASSERT_TRUE(m.Register("a", Reg(proto::WORKER), {}).ok());
  EXPECT_EQ(m.Register("b", Reg(proto::WORKER), {}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Register("c", Reg(proto::SERVER), {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register("d", Reg(proto::SCHEDULER), {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MembershipTest, SilentNodesExpireAndOnlyOnce) {
  Membership m(1, 2, 2);
  SteadyTime t0{};
  ASSERT_TRUE(m.Register("s", Reg(proto::SERVER, "tcp://h:1"), t0).ok());
  ASSERT_TRUE(m.Register("w0", Reg(proto::WORKER), t0).ok());
  ASSERT_TRUE(m.Register("w1", Reg(proto::WORKER), t0).ok());
  m.Touch("s", t0 + milliseconds(900));
  m.Touch("w0", t0 + milliseconds(900));
  auto dead = m.ExpireSilent(t0 + milliseconds(1500), milliseconds(1000));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0], 3);  // w1
  EXPECT_TRUE(m.ExpireSilent(t0 + milliseconds(1600), milliseconds(1000)).empty());
  EXPECT_EQ(m.LiveWorkers(), std::vector<int32_t>{2});
  EXPECT_FALSE(m.AllWorkersDone());
  m.MarkLeft(2);
  EXPECT_TRUE(m.AllWorkersDone());
  EXPECT_EQ(m.LiveServers(), std::vector<int32_t>{1});
}

TEST(MembershipTest, LeftNodesDoNotExpire) {
  Membership m(1, 1, 1);
  ASSERT_TRUE(m.Register("w", Reg(proto::WORKER), {}).ok());
  m.MarkLeft(1);
  EXPECT_TRUE(m.ExpireSilent(SteadyTime{} + milliseconds(10000), milliseconds(1)).empty());
}

TEST(MembershipTest, HonoursRequestedRanks) {
  Membership m(1, 3, 3);
  proto::Header want2 = Reg(proto::WORKER);
  want2.set_rank(2);
  auto a = m.Register("a", want2, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->info.rank(), 2);
  auto b = m.Register("b", Reg(proto::WORKER), {});  // any rank: the smallest free one
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->info.rank(), 0);
  auto taken = m.Register("c", want2, {});
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("rank 2 is already taken"), std::string::npos);
  proto::Header want9 = Reg(proto::WORKER);
  want9.set_rank(9);
  auto out_of_range = m.Register("d", want9, {});
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  auto c = m.Register("e", Reg(proto::WORKER), {});  // refusals took nothing
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->info.rank(), 1);
  EXPECT_TRUE(m.Register("s", Reg(proto::SERVER, "tcp://h:1"), {}).ok());
  EXPECT_TRUE(m.complete());
}

proto::Header RegRank(int rank) {
  proto::Header h = Reg(proto::WORKER);
  h.set_rank(rank);
  return h;
}

// A formed cluster of one server and workers w0, w1 (ids 2, 3) that takes up to `max` workers.
Membership Formed(int max) {
  Membership m(1, 2, max);
  EXPECT_TRUE(m.Register("s", Reg(proto::SERVER, "tcp://h:1"), {}).ok());
  EXPECT_TRUE(m.Register("w0", Reg(proto::WORKER), {}).ok());
  EXPECT_TRUE(m.Register("w1", Reg(proto::WORKER), {}).ok());
  EXPECT_TRUE(m.complete());
  return m;
}

TEST(MembershipTest, WorkersJoinTheFormedClusterUpToMaxWorkers) {
  Membership m = Formed(3);
  auto late = m.Register("w2", Reg(proto::WORKER), {});
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ((*late)->info.rank(), 2);
  EXPECT_TRUE(m.JoinedLate(**late));
  EXPECT_EQ(m.LiveWorkers().size(), 3u);
  auto full = m.Register("w3", Reg(proto::WORKER), {});
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(full.status().message().find("maximum of 3 workers"), std::string::npos);
  EXPECT_EQ(m.Register("w9", RegRank(3), {}).status().code(), StatusCode::kFailedPrecondition);
  m.MarkLeft((*late)->info.id());  // a departure frees a place, and its rank
  auto again = m.Register("w4", Reg(proto::WORKER), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->info.rank(), 2);
  EXPECT_EQ(m.View().nodes_size(), 4);  // the departed rank 2 is superseded
  EXPECT_EQ(m.View().max_workers(), 3);
}

TEST(MembershipTest, ARestartedWorkerTakesItsRankOnceTheOldOneIsDead) {
  Membership m = Formed(4);
  auto early = m.Register("w1-again", RegRank(1), {});
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kUnavailable);  // w1 is alive: retry later
  m.Touch("s", SteadyTime{} + milliseconds(2000));
  m.Touch("w0", SteadyTime{} + milliseconds(2000));
  ASSERT_EQ(m.ExpireSilent(SteadyTime{} + milliseconds(2500), milliseconds(1000)),
            std::vector<int32_t>{3});
  // A worker asking for any rank does not take the dead one's: it may come back.
  auto other = m.Register("new", Reg(proto::WORKER), SteadyTime{} + milliseconds(2500));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->info.rank(), 2);
  auto back = m.Register("w1-again", RegRank(1), SteadyTime{} + milliseconds(2500));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->info.rank(), 1);
  EXPECT_NE((*back)->info.id(), 3);
  EXPECT_TRUE(m.JoinedLate(**back));
  int rank1 = 0;
  const proto::ClusterView view = m.View();
  for (const proto::NodeInfo& n : view.nodes()) rank1 += n.role() == proto::WORKER && n.rank() == 1;
  EXPECT_EQ(rank1, 1) << "the dead rank-1 worker is superseded in the view";
  EXPECT_EQ(m.Register("x", RegRank(4), {}).status().code(), StatusCode::kInvalidArgument);
}

// Registration never takes a rank from a live node: neither while the cluster forms nor once it
// runs, for servers and workers alike; the registering node is told why, and the holder keeps
// its id, rank and address.
TEST(MembershipTest, RegistrationNeverTakesTheRankOfALiveNode) {
  Membership forming(2, 2, 2);
  proto::Header s0 = Reg(proto::SERVER, "tcp://h:1");
  s0.set_rank(0);
  ASSERT_TRUE(forming.Register("s0", s0, {}).ok());
  s0.set_address("tcp://evil:1");
  EXPECT_EQ(forming.Register("evil-s", s0, {}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(forming.Register("w0", RegRank(0), {}).ok());
  EXPECT_EQ(forming.Register("evil-w", RegRank(0), {}).status().code(),
            StatusCode::kFailedPrecondition);

  Membership m = Formed(4);  // s (id 1, rank 0), w0, w1 alive
  proto::Header server = Reg(proto::SERVER, "tcp://evil:2");
  server.set_rank(0);
  EXPECT_EQ(m.Register("evil-s", server, {}).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(m.Register("evil-w", RegRank(0), {}).status().code(), StatusCode::kUnavailable);
  const proto::ClusterView view = m.View();
  ASSERT_EQ(view.nodes_size(), 3);
  for (const proto::NodeInfo& n : view.nodes()) {
    EXPECT_NE(n.address(), "tcp://evil:2");
    if (n.role() == proto::SERVER) {
      EXPECT_EQ(n.id(), 1);
    }
  }
}

// A bucket per address: `burst` at once, then `rate` per second; only admissions take tokens.
proto::Header Standby(const std::string& address) {
  proto::Header h = Reg(proto::SERVER, address);
  h.mutable_replica()->set_standby(true);
  return h;
}

// --replicas: standbys back up the rank with the fewest backups, stay out of views and of the
// live servers, and one takes its dead primary's rank over.
TEST(MembershipTest, StandbysBackUpRanksEvenlyAndOneTakesItsDeadPrimarysRankOver) {
  Membership m(2, 1, 1);
  m.set_replicas(1);
  SteadyTime t0{};
  ASSERT_TRUE(m.Register("s0", Reg(proto::SERVER, "tcp://h:1"), t0).ok());
  ASSERT_TRUE(m.Register("s1", Reg(proto::SERVER, "tcp://h:2"), t0).ok());
  auto b0 = m.Register("b0", Standby("tcp://h:3"), t0);
  auto b1 = m.Register("b1", Standby("tcp://h:4"), t0);
  ASSERT_TRUE(b0.ok() && b1.ok());
  EXPECT_NE((*b0)->info.rank(), (*b1)->info.rank());
  EXPECT_TRUE((*b0)->info.standby());
  // Every rank has its backup: one more is told to retry (a backup may die meanwhile).
  EXPECT_EQ(m.Register("b2", Standby("tcp://h:5"), t0).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(m.Register("w", Reg(proto::WORKER), t0).ok());
  EXPECT_TRUE(m.complete());
  EXPECT_EQ(m.View().nodes_size(), 3);  // the two primaries and the worker
  EXPECT_EQ(m.LiveServers().size(), 2u);
  EXPECT_EQ(m.Backups(0).size(), 1u);

  Member& dead = *m.ById(1);  // s0, rank 0
  dead.state = Member::State::kDead;
  Member& backup = *m.Backups(0)[0];
  m.Promote(backup, dead);
  EXPECT_EQ(m.Primary(0), &backup);
  EXPECT_TRUE(m.Backups(0).empty());
  const proto::ClusterView view = m.View();
  int rank0 = 0;
  for (const proto::NodeInfo& n : view.nodes()) rank0 += n.role() == proto::SERVER && n.rank() == 0;
  EXPECT_EQ(rank0, 1);  // the promoted backup, not the dead primary
  // The rank lacks a backup now: the old primary, restarted on its data dir (it asks for rank
  // 0), becomes its backup, as a standby (its copy is behind the new primary).
  proto::Header restarted = Reg(proto::SERVER, "tcp://h:7");
  restarted.set_rank(0);
  auto again = m.Register("s0-again", restarted, t0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->info.standby());
  EXPECT_EQ((*again)->info.rank(), 0);
  EXPECT_EQ(m.Primary(0), &backup);
  // Every rank has its backup: another restarted old primary is told to retry later (it would
  // back up another rank lacking one: none does).
  proto::Header late = Reg(proto::SERVER, "tcp://h:8");
  late.set_rank(0);
  EXPECT_EQ(m.Register("s0-late", late, t0).status().code(), StatusCode::kUnavailable);
}

// Both ranks lack a backup: a failed-over primary that comes back backs up its own rank (its
// copy's layout), not the first one lacking.
TEST(MembershipTest, AFailedOverPrimaryThatComesBackBacksUpItsOwnRank) {
  Membership m(2, 1, 1);
  m.set_replicas(1);
  SteadyTime t0{};
  ASSERT_TRUE(m.Register("s0", Reg(proto::SERVER, "tcp://h:1"), t0).ok());
  ASSERT_TRUE(m.Register("s1", Reg(proto::SERVER, "tcp://h:2"), t0).ok());
  proto::Header of_rank1 = Standby("tcp://h:3");
  of_rank1.set_rank(1);  // rank 0 would be the first lacking a backup either way
  auto b = m.Register("b", of_rank1, t0);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(m.Register("w", Reg(proto::WORKER), t0).ok());
  Member& backup = *m.ById((*b)->info.id());
  const int32_t rank = backup.info.rank();
  ASSERT_EQ(rank, 1);
  Member& dead = *m.ById(2);  // s1, the primary of rank 1
  ASSERT_EQ(dead.info.rank(), rank);
  dead.state = Member::State::kDead;
  m.Promote(backup, dead);
  proto::Header again = Reg(proto::SERVER, "tcp://h:4");
  again.set_rank(rank);
  auto back = m.Register("s-again", again, t0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE((*back)->info.standby());
  EXPECT_EQ((*back)->info.rank(), rank);
}

TEST(MembershipTest, StandbysNeedReplicas) {
  Membership m(1, 1, 1);
  EXPECT_EQ(m.Register("b", Standby("tcp://h:1"), {}).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(JoinLimiterTest, EachAddressGetsItsBurstThenItsRate) {
  JoinLimiter joins(/*rate=*/2, /*burst=*/3);
  double now = 10;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(joins.Wait("10.0.0.1", now), 0) << i;
    joins.Take("10.0.0.1", now);
  }
  EXPECT_DOUBLE_EQ(joins.Wait("10.0.0.1", now), 0.5);  // one token in 1 / rate
  EXPECT_EQ(joins.Wait("10.0.0.2", now), 0) << "another address has its own bucket";
  EXPECT_EQ(joins.Wait("10.0.0.1", now), 0.5) << "asking takes nothing";
  now += 0.25;
  EXPECT_DOUBLE_EQ(joins.Wait("10.0.0.1", now), 0.25);
  now += 0.25;
  EXPECT_EQ(joins.Wait("10.0.0.1", now), 0);
  joins.Take("10.0.0.1", now);
  EXPECT_DOUBLE_EQ(joins.Wait("10.0.0.1", now), 0.5);
  now += 100;  // refilled up to the burst, not beyond
  for (int i = 0; i < 3; ++i) joins.Take("10.0.0.1", now);
  EXPECT_GT(joins.Wait("10.0.0.1", now), 0);
}

TEST(JoinLimiterTest, RateZeroIsNoLimitAndTheBucketsAreBounded) {
  JoinLimiter none(0, 1);
  for (int i = 0; i < 100; ++i) none.Take("a", 0);
  EXPECT_EQ(none.Wait("a", 0), 0);
  EXPECT_EQ(none.addresses(), 0u);

  JoinLimiter joins(1, 2, /*max_addresses=*/4);
  for (int i = 0; i < 4; ++i) joins.Take("busy-" + std::to_string(i), 0);
  joins.Take("busy-0", 0);
  joins.Take("new", 0);  // none full: all dropped, the newcomer kept
  EXPECT_EQ(joins.addresses(), 1u);
  for (int i = 0; i < 3; ++i) joins.Take("busy-" + std::to_string(i), 10);
  ASSERT_EQ(joins.addresses(), 4u);
  joins.Take("busy-0", 20);
  joins.Take("busy-0", 20);
  joins.Take("other", 20);  // the full buckets (quiet since) go; busy-0's spent one stays
  EXPECT_EQ(joins.addresses(), 2u);
  EXPECT_GT(joins.Wait("busy-0", 20), 0);
  EXPECT_EQ(joins.Wait("other", 20), 0);
}

}  // namespace
}  // namespace hetps
