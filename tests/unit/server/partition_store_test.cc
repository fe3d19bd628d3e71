#include "server/partition_store.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace hetps {
namespace {

class PartitionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto map = ShardMap::Build({{"a", {1000}, 0}, {"b", {300}, 1}}, 2, 400 * 4);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    OptimizerOptions o;
    o.lr = 1.0;
    sgd_ = std::move(*MakeOptimizer("sgd", o));
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
  OptimizerOptions o;
  o.lr = 1.0;
  auto sgd = std::move(*MakeOptimizer("sgd", o));
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
