#include "server/partition_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>

namespace hetps {
namespace {

class PartitionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto map = ShardMap::Build({{"a", {1000}, 0}, {"b", {300}, 1}}, 2, 400 * 4);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    sgd_ = std::move(*MakeOptimizer("sgd:lr=1.0"));
  }
  ShardMap map_;
  std::unique_ptr<Optimizer> sgd_;
};

TEST_F(PartitionStoreTest, HoldsExactlyItsOwnPartitions) {
  auto init = *Initializer::Make({"zeros", 0, 1});
  PartitionStore s0(map_, 0, *sgd_, init), s1(map_, 1, *sgd_, init);
  EXPECT_EQ(s0.num_partitions() + s1.num_partitions(),
            static_cast<int64_t>(map_.partitions().size()));
  EXPECT_EQ(s0.bytes() + s1.bytes(), 1300 * 4);
  for (const Partition& p : map_.partitions()) {
    PartitionStore& mine = p.server_rank == 0 ? s0 : s1;
    PartitionStore& other = p.server_rank == 0 ? s1 : s0;
    ASSERT_NE(mine.Find(p.id), nullptr);
    EXPECT_EQ(other.Find(p.id), nullptr);
    EXPECT_TRUE(mine.Find(p.id)->initialized());
  }
  EXPECT_EQ(s0.Find(-1), nullptr);
  EXPECT_EQ(s0.Find(1000), nullptr);
}

TEST_F(PartitionStoreTest, SeededValuesMatchTheInitializer) {
  auto init = *Initializer::Make({"uniform", 0.1, 9});
  PartitionStore s(map_, 0, *sgd_, init);
  for (const Partition& p : map_.partitions()) {
    if (p.server_rank != 0) continue;
    std::vector<float> want(p.length);
    init.Fill(map_.tensors()[p.tensor_id].name, p.offset, want.data(), p.length);
    const float* got = s.Find(p.id)->values();
    EXPECT_EQ(std::vector<float>(got, got + p.length), want);
  }
}

// A store of 64 MiB and more is built by several threads: every partition still holds exactly
// what the initializer gives for its tensor and offset, with zeroed optimizer slots, and each
// has its own aggregator.
TEST(PartitionStoreBuildTest, ALargeStoreBuiltInParallelHoldsWhatTheInitializerGives) {
  auto map = ShardMap::Build({{"big", {int64_t{9} << 20}, 0}, {"small", {1000}, 1}}, 1, 1 << 20);
  ASSERT_TRUE(map.ok());
  auto adam = std::move(*MakeOptimizer("adam:lr=0.001"));  // two slots: 27M floats in all
  auto init = *Initializer::Make({"uniform", 0.1, 5});
  PartitionStore s(*map, 0, *adam, init);
  ASSERT_EQ(s.num_partitions(), static_cast<int64_t>(map->partitions().size()));
  std::set<const Aggregator*> aggregators;
  for (const Partition& p : map->partitions()) {
    PartitionState* part = s.Find(p.id);
    ASSERT_NE(part, nullptr);
    ASSERT_TRUE(part->initialized());
    aggregators.insert(part->aggregator());
    std::vector<float> want(p.length);
    init.Fill(map->tensors()[p.tensor_id].name, p.offset, want.data(), p.length);
    ASSERT_EQ(std::vector<float>(part->values(), part->values() + p.length), want) << p.id;
    const std::vector<const float*> arrays = part->Arrays();
    ASSERT_EQ(arrays.size(), 3u);
    for (size_t k = 1; k < arrays.size(); ++k) {
      ASSERT_TRUE(std::all_of(arrays[k], arrays[k] + p.length, [](float v) { return v == 0; }))
          << p.id;
    }
  }
  EXPECT_EQ(aggregators.size(), map->partitions().size());
  EXPECT_EQ(aggregators.count(nullptr), 0u);
}

TEST_F(PartitionStoreTest, WorkerInitFirstWriterWinsAndVersionCountsUpdates) {
  auto init = *Initializer::Make({"worker", 0, 1});
  PartitionStore s(map_, 0, *sgd_, init);
  auto held = std::find_if(map_.partitions().begin(), map_.partitions().end(),
                           [](const Partition& q) { return q.server_rank == 0; });
  ASSERT_NE(held, map_.partitions().end());
  const Partition& p = *held;
  PartitionState* state = s.Find(p.id);
  ASSERT_NE(state, nullptr);
  EXPECT_FALSE(state->initialized());
  std::vector<float> first(p.length, 2.0f), second(p.length, 5.0f), g(p.length, 0.5f);
  EXPECT_TRUE(state->InitializeFrom(first.data()));
  EXPECT_FALSE(state->InitializeFrom(second.data()));
  EXPECT_EQ(state->values()[0], 2.0f);
  state->ApplyGradient(*sgd_, g.data(), 1.0f);
  state->ApplyGradient(*sgd_, g.data(), 1.0f);
  EXPECT_EQ(state->version(), 2);
  EXPECT_EQ(state->values()[p.length - 1], 1.0f);
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

TEST(PartitionStateTest, SnapshotIsNotChangedByLaterUpdates) {
  Partition p;
  p.length = 4;
  PartitionState state(p, 0);
  auto sgd = std::move(*MakeOptimizer("sgd:lr=1.0"));
  std::vector<float> init = {1, 2, 3, 4}, g = {1, 1, 1, 1};
  ASSERT_TRUE(state.InitializeFrom(init.data()));
  auto snapshot = state.Snapshot();
  state.ApplyGradient(*sgd, g.data(), 1.0f);  // copies: the snapshot is still held
  EXPECT_EQ(*snapshot, init);
  EXPECT_EQ(state.values()[0], 0.0f);
  const float* before = state.values();
  snapshot.reset();
  state.ApplyGradient(*sgd, g.data(), 1.0f);  // no snapshot out: updates in place
  EXPECT_EQ(state.values(), before);
  EXPECT_EQ(state.values()[3], 2.0f);
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

RoundSpec BspRound(int64_t clock) {
  RoundSpec r;
  r.clock = clock;
  return r;
}

// BSP (ALGORITHMS.md §1 test c): holding each clock's gradients and applying them as one summed
// step is bit-identical to sequential mini-batch SGD over all workers' batches, in whatever
// order the workers' pushes arrive.
TEST(PartitionStateTest, HeldRoundsAreBitIdenticalToSequentialMiniBatchSgd) {
  const int kWorkers = 4, kClocks = 5, n = 1000;
  Partition p;
  p.length = n;
  auto opt = std::move(*MakeOptimizer("momentum:lr=0.05,momentum=0.9"));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<std::vector<std::vector<float>>> g(kClocks);  // [clock][worker][i]
  for (auto& clock : g) {
    for (int w = 0; w < kWorkers; ++w) {
      clock.emplace_back(n);
      for (float& x : clock.back()) x = dist(rng);
    }
  }
  std::vector<float> init(n);
  for (float& x : init) x = dist(rng);

  // Reference: one step per clock with the batch gradient summed in worker order.
  PartitionState ref(p, opt->num_slots());
  ASSERT_TRUE(ref.InitializeFrom(init.data()));
  for (int c = 0; c < kClocks; ++c) {
    std::vector<float> sum(n, 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      for (int i = 0; i < n; ++i) sum[i] += g[c][w][i];
    }
    ref.ApplyGradient(*opt, sum.data(), 1.0f);
  }

  PartitionState held(p, opt->num_slots());
  ASSERT_TRUE(held.InitializeFrom(init.data()));
  std::vector<int> order = {2, 0, 3, 1};
  for (int c = 0; c < kClocks; ++c) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int w : order) {
      zmq::message_t frame(g[c][w].data(), n * sizeof(float));
      held.Hold(c, w, std::move(frame));
    }
    EXPECT_EQ(held.ApplyRound(*opt, BspRound(c)), 1);
  }
  EXPECT_EQ(held.held_clocks(), 0u);
  EXPECT_EQ(held.version(), kClocks);
  for (int i = 0; i < n; ++i) ASSERT_EQ(held.values()[i], ref.values()[i]) << i;
}

TEST(PartitionStateTest, BspRoundCoversOnlyFinishedClocks) {
  Partition p;
  p.length = 2;
  auto sgd = std::move(*MakeOptimizer("sgd:lr=1.0"));
  PartitionState s(p, 0);
  std::vector<float> zero = {0, 0}, one = {1, 1};
  ASSERT_TRUE(s.InitializeFrom(zero.data()));
  s.Hold(3, 1, zmq::message_t(one.data(), 8));
  s.Hold(4, 1, zmq::message_t(one.data(), 8));
  EXPECT_EQ(s.ApplyRound(*sgd, BspRound(2)), 0);
  EXPECT_EQ(s.ApplyRound(*sgd, BspRound(3)), 1);
  EXPECT_EQ(s.values()[0], -1.0f);
  EXPECT_EQ(s.held_clocks(), 1u);
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

// Backup workers: a round names whose updates count and averages them; everything else held up
// to the round's clock is dropped.
TEST(PartitionStateTest, RoundOfNamedWorkersAveragesThemAndDropsTheRest) {
  Partition p;
  p.length = 1;
  auto sgd = std::move(*MakeOptimizer("sgd:lr=1.0"));
  PartitionState s(p, 0);
  float zero = 0, one = 1, two = 2, ten = 10, hundred = 100;
  ASSERT_TRUE(s.InitializeFrom(&zero));
  s.Hold(2, 4, zmq::message_t(&hundred, 4));  // a closed step's leftover
  s.Hold(3, 1, zmq::message_t(&one, 4));
  s.Hold(3, 2, zmq::message_t(&two, 4));
  s.Hold(3, 3, zmq::message_t(&ten, 4));  // late for step 3
  RoundSpec backup;
  backup.clock = 3;
  backup.workers = {1, 2};
  backup.only_clock = true;
  backup.combine = RoundSpec::Combine::kMean;
  EXPECT_EQ(s.ApplyRound(*sgd, backup), 1);
  EXPECT_FLOAT_EQ(s.values()[0], -1.5f);
  EXPECT_EQ(s.held_clocks(), 0u);
  EXPECT_EQ(s.version(), 1);
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

std::unique_ptr<Optimizer> UnitSgd() { return std::move(*MakeOptimizer("sgd:lr=1.0")); }

// FedSA with K = N and fresh uploads is FedAvg: one step on the sample-weighted mean.
TEST(PartitionStateTest, WeightedRoundIsFedAvgForFreshUploads) {
  Partition p;
  p.length = 1;
  auto sgd = UnitSgd();
  PartitionState s(p, 0);
  float zero = 0, d1 = 6, d2 = 3, d3 = 1;
  ASSERT_TRUE(s.InitializeFrom(&zero));
  s.Hold(4, 1, zmq::message_t(&d1, 4), /*weight=*/1, /*base=*/0);
  s.Hold(7, 2, zmq::message_t(&d2, 4), 2, 0);
  s.Hold(5, 3, zmq::message_t(&d3, 4), 3, 0);
  RoundSpec r;
  r.clock = std::numeric_limits<int64_t>::max();
  r.workers = {1, 2, 3};
  r.one_step = true;
  r.combine = RoundSpec::Combine::kWeighted;
  r.staleness_exponent = 0.5;
  EXPECT_EQ(s.ApplyRound(*sgd, r), 1);
  EXPECT_FLOAT_EQ(s.values()[0], -(1 * 6.0f + 2 * 3.0f + 3 * 1.0f) / 6.0f);
  EXPECT_EQ(s.held_clocks(), 0u);
}

TEST(PartitionStateTest, SemiAsyncRoundKeepsOthersAndWeighsStaleUploadsLess) {
  Partition p;
  p.length = 1;
  auto sgd = UnitSgd();
  PartitionState s(p, 0);
  float zero = 0, one = 1;
  ASSERT_TRUE(s.InitializeFrom(&zero));
  for (int i = 0; i < 3; ++i) s.ApplyGradient(*sgd, &zero, 1.0f);  // version 3
  s.Hold(2, 1, zmq::message_t(&one, 4), 1, /*base=*/3);            // fresh: weight 1
  s.Hold(0, 2, zmq::message_t(&one, 4), 1, /*base=*/0);            // staleness 3: weight 1/2
  s.Hold(2, 9, zmq::message_t(&one, 4), 1, 3);                     // not in this round
  RoundSpec r;
  r.clock = std::numeric_limits<int64_t>::max();
  r.workers = {1, 2};
  r.one_step = true;
  r.combine = RoundSpec::Combine::kWeighted;
  r.staleness_exponent = 0.5;
  EXPECT_EQ(s.ApplyRound(*sgd, r), 1);
  EXPECT_FLOAT_EQ(s.values()[0], -1.0f);  // weighted mean of two ones
  EXPECT_EQ(s.held_clocks(), 1u);         // worker 9's upload waits for its round
  r.workers = {9};
  EXPECT_EQ(s.ApplyRound(*sgd, r), 1);  // and is used exactly once
  EXPECT_EQ(s.ApplyRound(*sgd, r), 0);
  EXPECT_FLOAT_EQ(s.values()[0], -2.0f);
}

// A late upload (RoundSpec::late) joins the round's one weighted step with its weight times
// its factor; from keep_from on, unused uploads wait, older ones are dropped.
TEST(PartitionStateTest, LateUploadsJoinTheRoundsStepAndKeepFromBoundsWhatWaits) {
  Partition p;
  p.length = 1;
  auto sgd = UnitSgd();
  PartitionState s(p, 0);
  float zero = 0, d0 = 4, d1 = 10, d2 = 1, d3 = 7;
  ASSERT_TRUE(s.InitializeFrom(&zero));
  s.Hold(3, 1, zmq::message_t(&d0, 4), /*weight=*/2, 0);  // late from round 3
  s.Hold(2, 5, zmq::message_t(&d3, 4), 1, 0);             // older than keep_from: dropped
  s.Hold(4, 2, zmq::message_t(&d1, 4), 1, 0);             // round 4's kept upload
  s.Hold(4, 3, zmq::message_t(&d2, 4), 1, 0);             // round 4's unused upload: waits
  RoundSpec r;
  r.clock = 4;
  r.workers = {2};
  r.only_clock = true;
  r.one_step = true;
  r.combine = RoundSpec::Combine::kWeighted;
  r.late = {{.worker = 1, .clock = 3, .factor = 0.5}};
  r.keep_from = 3;
  EXPECT_EQ(s.ApplyRound(*sgd, r), 1);
  // (1 * 10 + 2 * 0.5 * 4) / (1 + 1) = 7
  EXPECT_FLOAT_EQ(s.values()[0], -7.0f);
  EXPECT_EQ(s.held_clocks(), 1u) << "round 4's unused upload waits; round 2's was dropped";
}

}  // namespace
}  // namespace hetps
