// A server's part of a whole-run checkpoint (server/cut_file.h): partitions written by their
// owners come back whole (values, optimizer slots, version, held updates), per-worker state
// moves to the resumed run's node ids, and a truncated or damaged file is refused naming it.
#include "server/cut_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "server/initializer.h"
#include "server/optimizer/optimizer.h"
#include "server/partition_store.h"
#include "tests/scratch_dir.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

class CutFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_);
    optimizer_ = std::move(*MakeOptimizer("adam:lr=0.5"));
  }

  // "a": two partitions of 100 floats, "b": one of 40; all on server rank 1.
  ShardMap map_ = *ShardMap::Build({{"a", {200}, 0}, {"b", {40}, 1}}, 1, 100 * 4);
  std::unique_ptr<Optimizer> optimizer_;
  Initializer zeros_ = *Initializer::Make({"zeros", 0, 1});
  testing::ScratchDir scratch_{"hetps-cut-file-test"};
  const fs::path dir_ = scratch_.path();

  std::unique_ptr<PartitionStore> Store() {
    // ShardMap::Build put everything on rank 0; the file below calls it rank 1.
    return std::make_unique<PartitionStore>(map_, 0, *optimizer_, zeros_);
  }
  proto::CutFileMeta Meta() {
    proto::CutFileMeta meta;
    meta.set_format(kCutFileFormat);
    meta.set_server_rank(1);
    meta.set_clock(42);
    *meta.mutable_shard_map() = ToProto(map_);
    return meta;
  }
  // Writes partitions {0, 1} as owner 0 and {2} as owner 1, like two owner threads would.
  void WriteTwoOwners(PartitionStore& store) {
    auto a = WriteCutFile(CutFileName(dir_.string(), 1, 0), Meta(), store, {0, 1});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = WriteCutFile(CutFileName(dir_.string(), 1, 1), Meta(), store, {2});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_GT(*a, 0);
  }
};

TEST_F(CutFileTest, PartitionsComeBackWhole) {
  auto store = Store();
  for (int32_t id = 0; id < 3; ++id) {
    PartitionState& p = *store->Find(id);
    std::vector<float> g(p.info().length);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>(i + id);
    p.ApplyGradient(*optimizer_, g.data(), 1);  // values and both Adam moments move
    p.ApplyGradient(*optimizer_, g.data(), 1);
  }
  std::vector<float> update(100, 3.0f);
  store->Find(1)->Hold(43, 7, zmq::message_t(update.data(), update.size() * sizeof(float)), 5, 2);
  WriteTwoOwners(*store);

  auto reader = CutReader::Open(dir_.string(), 1);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->meta().clock(), 42);
  auto restored = Store();
  for (int32_t id = 0; id < 3; ++id) {
    auto saved = (*reader)->Read(id);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    ASSERT_TRUE(restored->Find(id)->Load(*saved).ok());
    proto::PartitionCheckpoint want, got;
    store->Find(id)->Save(want);
    restored->Find(id)->Save(got);
    EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString()) << "partition " << id;
  }
  EXPECT_EQ(restored->Find(1)->held_clocks(), 1u);
  EXPECT_EQ(restored->Find(0)->version(), 2);
  EXPECT_EQ((*reader)->Read(9).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(CutReader::Open(dir_.string(), 0).ok()) << "no file of rank 0";
}

TEST_F(CutFileTest, TruncatedOrDamagedFileIsRefusedNamingIt) {
  auto store = Store();
  WriteTwoOwners(*store);
  const std::string path = CutFileName(dir_.string(), 1, 0);
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 3));
    const char junk[8] = {'d', 'a', 'm', 'a', 'g', 'e', 'd', '!'};
    f.write(junk, sizeof(junk));
  }
  auto damaged = CutReader::Open(dir_.string(), 1);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(path), std::string::npos) << damaged.status().message();
  fs::resize_file(path, size / 2);
  auto truncated = CutReader::Open(dir_.string(), 1);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find(path), std::string::npos)
      << truncated.status().message();
}

TEST_F(CutFileTest, PerWorkerStateMovesToTheResumedRunsIds) {
  proto::PartitionCheckpoint part;
  part.add_applied()->set_seq(3);
  for (int32_t w : {4, 5, 6}) part.add_held()->set_worker(w);
  auto& by_worker = (*part.mutable_aggregator()->mutable_per_worker())["read_version"];
  (*by_worker.mutable_numbers())[4] = 10;
  (*by_worker.mutable_numbers())[6] = 12;
  RemapWorkers(part, {{4, 14}, {5, 15}});  // 6 has no rank in the resumed run
  EXPECT_EQ(part.applied_size(), 0) << "old client incarnations are gone";
  ASSERT_EQ(part.held_size(), 2);
  EXPECT_EQ(part.held(0).worker(), 14);
  EXPECT_EQ(part.held(1).worker(), 15);
  const auto& numbers = part.aggregator().per_worker().at("read_version").numbers();
  EXPECT_EQ(numbers.size(), 1u);
  EXPECT_EQ(numbers.at(14), 10);
}

}  // namespace
}  // namespace hetps
