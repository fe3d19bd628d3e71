// Whole-run checkpoint folders (common/cut.h): the manifest round-trips, the newest complete
// cut is found (incomplete ones never are), damage is refused naming the file, and pruning
// keeps the newest complete cuts and the one being written.
#include "common/cut.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/scratch_dir.h"
namespace hetps {
namespace {

namespace fs = std::filesystem;

class CutTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_); }
  // A cut folder at `clock`, complete (with a manifest) or not.
  std::string MakeCut(int64_t clock, bool complete) {
    const std::string cut = CutDir(dir_.string(), clock);
    fs::create_directories(cut);
    std::ofstream(cut + "/server-0-0.sst") << "x";
    if (complete) {
      proto::CutManifest m;
      m.set_format(kCutFormat);
      m.set_clock(clock);
      m.set_num_servers(2);
      EXPECT_TRUE(WriteManifest(cut, m).ok());
    }
    return cut;
  }
  testing::ScratchDir scratch_{"hetps-cut-test"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(CutTest, ManifestRoundTripsAndFoldersSortByClock) {
  EXPECT_EQ(fs::path(CutDir("/x", 750)).filename(), "clock-000000750");
  proto::CutManifest m;
  m.set_format(kCutFormat);
  m.set_clock(750);
  m.set_num_servers(2);
  m.set_num_workers(4);
  m.mutable_policy()->set_consistency("ssp:staleness=2");
  m.set_bytes(12345);
  const std::string cut = CutDir(dir_.string(), 750);
  fs::create_directories(cut);
  ASSERT_TRUE(WriteManifest(cut, m).ok());
  auto read = ReadManifest(cut);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->SerializeAsString(), m.SerializeAsString());
  EXPECT_FALSE(fs::exists(cut + "/manifest.json.tmp"));
}

TEST_F(CutTest, LatestIsTheNewestCompleteCut) {
  EXPECT_EQ(LatestCut(dir_.string()).status().code(), StatusCode::kNotFound);
  MakeCut(100, true);
  const std::string newest = MakeCut(200, true);
  MakeCut(300, false);  // interrupted: never read
  auto latest = LatestCut(dir_.string());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, newest);
  EXPECT_EQ(*LatestCut(newest), newest) << "a cut's own folder is accepted";
  auto incomplete = LatestCut(CutDir(dir_.string(), 300));
  ASSERT_FALSE(incomplete.ok());
  EXPECT_NE(incomplete.status().message().find("not a complete checkpoint"), std::string::npos);
  EXPECT_FALSE(LatestCut((dir_ / "absent").string()).ok());
}

TEST_F(CutTest, DamagedOrNewerManifestIsRefusedNamingIt) {
  const std::string cut = MakeCut(5, true);
  std::ofstream(cut + "/manifest.json", std::ios::trunc) << "{\"clock\": \"5\", \"form";
  auto damaged = ReadManifest(cut);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(cut + "/manifest.json"), std::string::npos)
      << damaged.status().message();
  std::ofstream(cut + "/manifest.json", std::ios::trunc) << "{\"format\": 99, \"clock\": \"5\"}";
  auto newer = ReadManifest(cut);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("format 99"), std::string::npos);
}

TEST_F(CutTest, PruneKeepsTheNewestCompleteCutsAndTheOneBeingWritten) {
  MakeCut(10, true);
  MakeCut(15, false);  // an attempt called off before 20 was taken: removed
  MakeCut(20, true);
  MakeCut(30, true);
  MakeCut(40, false);  // being written now: kept
  EXPECT_EQ(PruneCuts(dir_.string(), 2), 2);
  for (int64_t clock : {20, 30, 40}) EXPECT_TRUE(fs::exists(CutDir(dir_.string(), clock)));
  for (int64_t clock : {10, 15}) EXPECT_FALSE(fs::exists(CutDir(dir_.string(), clock)));
  EXPECT_EQ(PruneCuts(dir_.string(), 0), 0) << "0 keeps everything";
}

}  // namespace
}  // namespace hetps
