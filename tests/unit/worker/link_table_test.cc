#include "worker/link_table.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

namespace hetps {
namespace {

constexpr char kTable[] =
    "# a comment\n"
    "name,share,up_mbps,down_mbps,latency_ms,jitter_ms,source\n"
    "slow,3,1.5,8,60,10,somewhere\n"
    "fast, 1 ,40,90,20,0,elsewhere\n";

TEST(LinkTableTest, RowsAreReadByTheirColumnNames) {
  auto t = ParseLinkTable(kTable, "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "slow");
  EXPECT_DOUBLE_EQ((*t)[0].share, 3);
  EXPECT_DOUBLE_EQ((*t)[0].link.up_mbps, 1.5);
  EXPECT_DOUBLE_EQ((*t)[0].link.down_mbps, 8);
  EXPECT_DOUBLE_EQ((*t)[0].link.latency_ms, 60);
  EXPECT_DOUBLE_EQ((*t)[0].link.jitter_ms, 10);
  EXPECT_DOUBLE_EQ((*t)[0].link.loss, 0) << "a column left out is 0";
  EXPECT_DOUBLE_EQ((*t)[1].share, 1);
}

// Clients draw rows in proportion to their shares, each always the same row for its rank.
TEST(LinkTableTest, ClientsDrawRowsByShareAndAlwaysTheSame) {
  auto t = ParseLinkTable(kTable, "t.csv");
  ASSERT_TRUE(t.ok());
  std::map<std::string, int> drawn;
  for (int rank = 0; rank < 4000; ++rank) {
    const LinkKind& k = DrawLink(*t, 7, rank);
    ++drawn[k.name];
    EXPECT_EQ(&DrawLink(*t, 7, rank), &k);
  }
  EXPECT_NEAR(drawn["slow"] / 4000.0, 0.75, 0.03);
  int differ = 0;
  for (int rank = 0; rank < 100; ++rank) differ += &DrawLink(*t, 7, rank) != &DrawLink(*t, 8, rank);
  EXPECT_GT(differ, 10) << "another seed, other draws";
}

TEST(LinkTableTest, ABadTableIsRefusedNamingTheLine) {
  EXPECT_EQ(ReadLinkTable("/nonexistent.csv").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ParseLinkTable("name,share,up_mbps\nx,1,2\n", "t.csv").ok()) << "missing columns";
  auto bad = ParseLinkTable("name,share,up_mbps,down_mbps,latency_ms\nx,1,fast,2,3\n", "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.csv:2"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseLinkTable("name,share,up_mbps,down_mbps,latency_ms\nx,0,1,2,3\n", "t.csv").ok())
      << "no share";
  EXPECT_FALSE(
      ParseLinkTable("name,share,up_mbps,down_mbps,latency_ms,loss\nx,1,1,2,3,1.5\n", "t.csv").ok())
      << "a loss of 1 or more";
  EXPECT_FALSE(ParseLinkTable("name,share,up_mbps,down_mbps,latency_ms\nx,1,1\n", "t.csv").ok())
      << "a short row";
}

// The table shipped for scenarios parses.
TEST(LinkTableTest, TheShippedTableParses) {
  const std::string path = std::string(HETPS_SOURCE_DIR) + "/deploy/edge/links/ookla.csv";
  auto t = ReadLinkTable(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->size(), 3u);
}

}  // namespace
}  // namespace hetps
