#include "common/shard_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/same_message.h"

namespace hetps {
namespace {

std::vector<TensorSpec> SomeTensors() {
  return {{"fc1.w", {784, 256}, 0}, {"fc1.b", {256}, 0},      {"fc2.w", {256, 128}, 1},
          {"fc2.b", {128}, 1},      {"embed", {5000, 64}, 2}, {"out", {128, 10}, 3}};
}

TEST(ShardMapTest, PartitionsCoverEachTensorWithoutOverlap) {
  auto map = ShardMap::Build(SomeTensors(), 3, /*partition_bytes=*/64 * 1024);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  for (size_t t = 0; t < map->tensors().size(); ++t) {
    int64_t next = 0;
    for (int32_t id : map->PartitionsOf(static_cast<int32_t>(t))) {
      const Partition& p = map->partitions()[id];
      EXPECT_EQ(p.offset, next) << "gap or overlap in tensor " << t;
      EXPECT_GT(p.length, 0);
      EXPECT_LE(p.length * 4, 64 * 1024);
      next = p.offset + p.length;
    }
    EXPECT_EQ(next, map->tensors()[t].NumElements());
  }
}

TEST(ShardMapTest, LargeTensorIsSplitIntoNearEqualPartitions) {
  auto map = ShardMap::Build({{"big", {1000003}, 0}}, 2, 1 << 20);
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(map->partitions().size(), 4u);  // 4,000,012 bytes / 1 MiB -> 4
  int64_t lo = INT64_MAX, hi = 0;
  for (const Partition& p : map->partitions()) {
    lo = std::min(lo, p.length);
    hi = std::max(hi, p.length);
  }
  EXPECT_LE(hi - lo, 1);
}

TEST(ShardMapTest, BalancedByBytes) {
  for (int servers : {1, 2, 3, 5, 8}) {
    auto map = ShardMap::Build(SomeTensors(), servers, 32 * 1024);
    ASSERT_TRUE(map.ok());
    int64_t largest = 0;
    for (const Partition& p : map->partitions()) largest = std::max(largest, p.length * 4);
    std::vector<int64_t> bytes = map->ServerBytes();
    auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    EXPECT_LE(*hi - *lo, largest) << servers << " servers";
    int64_t total = 0;
    for (const auto& t : map->tensors()) total += t.NumBytes();
    int64_t placed = 0;
    for (int64_t b : bytes) placed += b;
    EXPECT_EQ(placed, total);
  }
}

TEST(ShardMapTest, DeterministicWhateverTheDeclarationOrder) {
  auto tensors = SomeTensors();
  auto a = ShardMap::Build(tensors, 3, 16 * 1024);
  std::reverse(tensors.begin(), tensors.end());
  auto b = ShardMap::Build(tensors, 3, 16 * 1024);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ToProto(*a).SerializeAsString(), ToProto(*b).SerializeAsString());
  EXPECT_EQ(a->tensors()[0].name, "embed");  // ids follow name order
  EXPECT_EQ(a->TensorId("fc2.w"), 4);
  EXPECT_EQ(a->TensorId("nope"), -1);
}

TEST(ShardMapTest, RejectsBadDeclarations) {
  EXPECT_EQ(ShardMap::Build({{"", {3}, 0}}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {3}, 0}, {"a", {3}, 0}}, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {3, 0}, 0}}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {}, 0}}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {-2}, 0}}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {3}, 0}}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", {3}, 0}}, 1, 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardMapTest, ProtoRoundTripAndTamperDetection) {
  auto map = ShardMap::Build(SomeTensors(), 2, 16 * 1024);
  ASSERT_TRUE(map.ok());
  proto::ShardMap p = ToProto(*map);
  auto back = ShardMapFromProto(p);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->partitions().size(), map->partitions().size());
  p.mutable_partitions(1)->set_server_rank(1 - p.partitions(1).server_rank());
  EXPECT_EQ(ShardMapFromProto(p).status().code(), StatusCode::kMalformed);
}

// Live re-sharding: a map with moved partitions round-trips, lists only what is off its rules'
// rank, and a node refuses a placement it could not have computed (a move of a table's bucket,
// to a rank that does not exist, listed twice, or at epoch 0).
TEST(ShardMapTest, MovedPartitionsRoundTripAndBadMovesAreRefused) {
  auto map = ShardMap::Build(
      {{"w", {1000}, 0}, {"b", {10}, 1}, {"t", {8}, 0, TableOptions{.dim = 8}}}, 2, 1024);
  ASSERT_TRUE(map.ok());
  const int32_t w0 = map->PartitionsOf(map->TensorId("w"))[0];
  const int32_t rank = map->partitions()[w0].server_rank;
  auto moved = map->WithMoves({{w0, 1 - rank}});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->epoch(), 1);
  EXPECT_EQ(moved->partitions()[w0].server_rank, 1 - rank);
  EXPECT_EQ(moved->moves(), (std::map<int32_t, int32_t>{{w0, 1 - rank}}));
  auto back = ShardMapFromProto(ToProto(*moved));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameMessage(ToProto(*back), ToProto(*moved)));
  // Moved home again: no longer listed, one epoch later.
  auto home = moved->WithMoves({{w0, rank}});
  ASSERT_TRUE(home.ok());
  EXPECT_EQ(home->epoch(), 2);
  EXPECT_TRUE(home->moves().empty());

  const int32_t bucket = map->PartitionsOf(map->TensorId("t"))[0];
  EXPECT_FALSE(map->WithMoves({{bucket, 1}}).ok());
  EXPECT_FALSE(map->WithMoves({{w0, 2}}).ok());
  EXPECT_FALSE(map->WithMoves({{9999, 0}}).ok());
  auto tamper = [&](auto edit) {
    proto::ShardMap p = ToProto(*moved);
    edit(p);
    return ShardMapFromProto(p).status().code();
  };
  EXPECT_EQ(tamper([](proto::ShardMap& p) { p.set_epoch(0); }), StatusCode::kMalformed);
  EXPECT_EQ(tamper([](proto::ShardMap& p) { *p.add_moves() = p.moves(0); }),
            StatusCode::kMalformed);
  EXPECT_EQ(tamper([](proto::ShardMap& p) { p.mutable_moves(0)->set_rank(7); }),
            StatusCode::kMalformed);
  EXPECT_EQ(tamper([&](proto::ShardMap& p) { p.mutable_moves(0)->set_rank(rank); }),
            StatusCode::kMalformed);
  EXPECT_EQ(tamper([&](proto::ShardMap& p) { p.mutable_partitions(w0)->set_server_rank(rank); }),
            StatusCode::kMalformed);
  EXPECT_EQ(tamper([&](proto::ShardMap& p) { p.clear_moves(); }), StatusCode::kMalformed);
}

// Elastic ranks: a map grown past the ranks the rules placed over keeps the rules' placement,
// takes moves to the new rank, and retires a rank only once it holds nothing.
TEST(ShardMapTest, AddedAndRetiredRanksRoundTrip) {
  auto map = ShardMap::Build({{"w", {4000}, 0}}, 2, 4096);  // four partitions
  ASSERT_TRUE(map.ok());
  auto grown = map->WithRanks(3, {});
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(grown->num_servers(), 3);
  EXPECT_EQ(grown->base_servers(), 2);
  EXPECT_FALSE(grown->WithRanks(2, {}).ok());  // ranks never shrink
  std::map<int32_t, int32_t> off0;
  for (const Partition& p : grown->partitions()) {
    if (p.server_rank == 0) off0[p.id] = 2;
  }
  EXPECT_FALSE(grown->WithRanks(3, {0}).ok()) << "rank 0 still holds partitions";
  auto moved = grown->WithMoves(off0);
  ASSERT_TRUE(moved.ok());
  auto retired = moved->WithRanks(3, {0});
  ASSERT_TRUE(retired.ok()) << retired.status().ToString();
  EXPECT_FALSE(retired->serving(0));
  EXPECT_TRUE(retired->serving(2));
  EXPECT_FALSE(retired->WithMoves({{off0.begin()->first, 0}}).ok()) << "a move to a retired rank";
  EXPECT_FALSE(retired->WithRanks(3, {0, 1, 2}).ok());
  auto back = ShardMapFromProto(ToProto(*retired));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameMessage(ToProto(*back), ToProto(*retired)));
  EXPECT_EQ(back->retired(), std::set<int32_t>{0});
  proto::ShardMap p = ToProto(*retired);
  p.add_retired(1);  // rank 1 holds partitions
  EXPECT_EQ(ShardMapFromProto(p).status().code(), StatusCode::kMalformed);
  p = ToProto(*retired);
  p.set_base_servers(4);  // more than its ranks
  EXPECT_EQ(ShardMapFromProto(p).status().code(), StatusCode::kMalformed);
}

// "The same model" is decided on the values, not on serialized bytes, which are not canonical:
// a shard map read back with a field this build does not know (written by a newer one), and
// metrics whose map entries were inserted in another order, are the same messages.
TEST(SameMessageTest, ValuesDecideNotBytes) {
  auto map = ShardMap::Build({{"w", {1000}, 0}, {"b", {10}, 1}}, 2, 1024);
  ASSERT_TRUE(map.ok());
  const proto::ShardMap plain = ToProto(*map);
  std::string bytes = plain.SerializeAsString();
  bytes += std::string("\xf8\x3e\x01", 3);  // field 999 (varint 1): unknown to this build
  proto::ShardMap newer;
  ASSERT_TRUE(newer.ParseFromString(bytes));
  EXPECT_NE(newer.SerializeAsString(), plain.SerializeAsString());
  EXPECT_TRUE(SameMessage(newer, plain));
  proto::ShardMap other = plain;
  other.mutable_tensors(0)->set_name("v");
  EXPECT_FALSE(SameMessage(other, plain));

  proto::MetricPoint a, b;
  for (int i = 0; i < 64; ++i) (*a.mutable_values())[std::to_string(i)] = i;
  for (int i = 63; i >= 0; --i) (*b.mutable_values())[std::to_string(i)] = i;
  EXPECT_TRUE(SameMessage(a, b));
  (*b.mutable_values())["7"] = 8;
  EXPECT_FALSE(SameMessage(a, b));
}

}  // namespace
}  // namespace hetps
