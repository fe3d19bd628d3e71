// --device_table (worker/edge/device_table.h): clients draw device kinds by their shares, the
// same kind and rate for a rank in every run, rates uniform in a row's measured range; the
// fastest rate is the reference device, so each client's slowdown (edge_profile.h) is the
// reference rate over its own and its virtual compute runs at its drawn rate.
#include "worker/edge/device_table.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "worker/edge/edge_profile.h"

namespace hetps {
namespace {

constexpr char kTable[] =
    "# a comment\n"
    "name,share,gflops,gflops_high,source\n"
    "phone,3,10,20,somewhere\n"
    "laptop, 1 ,80,,elsewhere\n";

TEST(DeviceTableTest, RowsAreReadByTheirColumnNamesAndARateAloneIsItsRange) {
  auto t = ParseDeviceTable(kTable, "d.csv");
  ASSERT_FALSE(t.ok()) << "an empty gflops_high is not a number";
  t = ParseDeviceTable("name,share,gflops,gflops_high\nphone,3,10,20\n", "d.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  t = ParseDeviceTable("source,gflops,name,share\nx,80,laptop,1\ny,10,phone,3\n", "d.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "laptop");
  EXPECT_DOUBLE_EQ((*t)[0].gflops, 80);
  EXPECT_DOUBLE_EQ((*t)[0].gflops_high, 80) << "no range column: the one figure";
  EXPECT_DOUBLE_EQ((*t)[1].share, 3);
  EXPECT_DOUBLE_EQ(ReferenceGflops(*t), 80);
}

TEST(DeviceTableTest, ClientsDrawKindsByShareAndRatesInTheRangeAlwaysTheSame) {
  auto t = ParseDeviceTable("name,share,gflops,gflops_high\nphone,3,10,20\nlaptop,1,80,80\n", "d");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::map<std::string, int> drawn;
  double low = 1e9, high = 0, sum = 0;
  for (int rank = 0; rank < 4000; ++rank) {
    const Device d = DrawDevice(*t, 7, rank);
    ++drawn[d.name];
    EXPECT_EQ(DrawDevice(*t, 7, rank).gflops, d.gflops) << "the same rank, the same device";
    if (d.name == "phone") {
      low = std::min(low, d.gflops);
      high = std::max(high, d.gflops);
      sum += d.gflops;
    } else {
      EXPECT_EQ(d.gflops, 80);
    }
  }
  EXPECT_NEAR(drawn["phone"] / 4000.0, 0.75, 0.03);
  EXPECT_GE(low, 10);
  EXPECT_LE(high, 20);
  EXPECT_LT(low, 10.2);
  EXPECT_GT(high, 19.8);
  EXPECT_NEAR(sum / drawn["phone"], 15, 0.3) << "uniform in the range";
  int differ = 0;
  for (int rank = 0; rank < 100; ++rank) {
    differ += DrawDevice(*t, 7, rank).gflops != DrawDevice(*t, 8, rank).gflops;
  }
  EXPECT_GT(differ, 90) << "another seed, other draws";
}

TEST(DeviceTableTest, ABadTableIsRefusedNamingTheLine) {
  EXPECT_EQ(ReadDeviceTable("/nonexistent.csv").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ParseDeviceTable("name,share\nx,1\n", "d.csv").ok()) << "no gflops column";
  auto bad = ParseDeviceTable("name,share,gflops\nx,1,5\ny,1,0\n", "d.csv");
  ASSERT_FALSE(bad.ok()) << "a rate of 0";
  EXPECT_NE(bad.status().message().find("d.csv:3"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseDeviceTable("name,share,gflops,gflops_high\nx,1,5,4\n", "d.csv").ok())
      << "a range upside down";
  EXPECT_FALSE(ParseDeviceTable("name,share,gflops\nx,0,5\n", "d.csv").ok()) << "no share";
}

// The profile a client gets: slowdown = reference / its rate (times --slowdown), the reference
// rate replaces --device_gflops, so its virtual compute rate is exactly the rate it drew.
TEST(DeviceTableTest, AClientComputesAtItsDrawnRateAndTheFastestIsTheReference) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("device_table_test_" + std::to_string(getpid()));
  std::ofstream(path) << "name,share,gflops,gflops_high\nphone,1,10,20\nlaptop,1,40,40\n";
  EdgeProfileFlags f;
  f.device_table = path.string();
  f.data_seed = 3;
  f.slowdown = 2;
  f.evaluators = 1;
  ASSERT_TRUE(ValidateEdgeProfileFlags(f).ok());
  EXPECT_DOUBLE_EQ(EdgeReferenceGflops(f), 40);
  auto table = ReadDeviceTable(path.string());
  ASSERT_TRUE(table.ok());
  for (int rank = 1; rank < 40; ++rank) {
    const Device d = DrawDevice(*table, 3, rank);
    EXPECT_EQ(EdgeDeviceName(f, rank), d.name);
    EXPECT_NEAR(EdgeSlowdown(f, rank), 2 * 40 / d.gflops, 1e-12);
    EXPECT_NEAR(EdgeReferenceGflops(f) / EdgeSlowdown(f, rank), d.gflops / 2, 1e-9);
  }
  EXPECT_EQ(EdgeDeviceName(f, 0), "") << "an evaluator is no edge device";
  EXPECT_EQ(EdgeSlowdown(f, 0), 1);
  f.device_gflops = 5;
  EXPECT_FALSE(ValidateEdgeProfileFlags(f).ok()) << "the table sets the reference rate";
  f.device_gflops = 1;
  f.device_table = "/nonexistent.csv";
  EXPECT_FALSE(ValidateEdgeProfileFlags(f).ok());
  std::filesystem::remove(path);
}

// The shipped table reads, and every row says where its figures come from.
TEST(DeviceTableTest, TheShippedTableReadsAndCitesItsSources) {
  const std::string path = std::string(HETPS_SOURCE_DIR) + "/deploy/edge/devices/phones.csv";
  auto t = ReadDeviceTable(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::ifstream in(path);
  int rows = 0;
  size_t source = std::string::npos;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream split(line);
    for (std::string cell; std::getline(split, cell, ',');) cells.push_back(cell);
    if (source == std::string::npos) {  // the header
      source = std::find(cells.begin(), cells.end(), "source") - cells.begin();
      ASSERT_LT(source, cells.size()) << "the table has no source column";
      continue;
    }
    ++rows;
    EXPECT_TRUE(source < cells.size() && !cells[source].empty()) << "no source: " << line;
  }
  EXPECT_EQ(rows, static_cast<int>(t->size()));
}

}  // namespace
}  // namespace hetps
