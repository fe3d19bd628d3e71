#include "worker/train/run_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hetps {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RunLogTest, MergesWorkersByTimeAndSkipsATornLine) {
  const std::string dir = ::testing::TempDir() + "/run_log_test";
  std::filesystem::remove_all(dir);
  {
    auto a = RunLog::Open(dir, 0);
    auto b = RunLog::Open(dir, 1);
    ASSERT_TRUE(a.ok() && b.ok());
    a->Record(10, 0, 1.5, std::nullopt, 1);
    b->Record(10, 1, 1.4, 0.71, 0);
    a->Record(20, 0, 0.9, 0.83, 2);
    // A deferred evaluation, written after the rows above, stamped before them.
    a->RecordAt(RunLog::Now() - 100, 5, 0, 2.0, 0.40, 0);
  }
  std::ofstream(dir + "/worker-1.csv", std::ios::app) << "1700000000.1,30,1,0.";  // torn
  ASSERT_TRUE(WriteWorkerTraffic(dir, 0,
                                 {.partition_pushes = 40,
                                  .bytes_pushed = 1000,
                                  .bytes_pulled = 3000,
                                  .dropped_pushes = 1,
                                  .push_staleness_sum = 30,
                                  .max_push_staleness = 3})
                  .ok());
  ASSERT_TRUE(WriteWorkerTraffic(dir, 1,
                                 {.partition_pushes = 20,
                                  .bytes_pushed = 500,
                                  .bytes_pulled = 1500,
                                  .dropped_pushes = 0,
                                  .push_staleness_sum = 15,
                                  .max_push_staleness = 5})
                  .ok());
  std::ofstream(dir + "/worker-2.traffic") << "7 x";  // malformed: skipped
  RunSummary s;
  s.accuracy = 0.83;
  s.wall_s = 2;
  s.iterations = 20;
  s.workers = 2;
  s.samples = 2560;
  s.consistency = "ssp";
  s.device = "cuda:0 (a GPU)";
  s.device_encoded_partitions = 6;
  s.step = {.pull = 0.001, .push_wait = 0, .compute = 0.0025, .encode = 0.0005, .clock = 0.00125};
  ASSERT_TRUE(FinishRun(dir, s).ok());
  const std::string metrics = Slurp(dir + "/metrics.csv");
  std::istringstream lines(metrics);
  std::string header, deferred, first, second, third, extra;
  std::getline(lines, header);
  std::getline(lines, deferred);
  std::getline(lines, first);
  std::getline(lines, second);
  std::getline(lines, third);
  EXPECT_EQ(header, "wall_s,clock,worker,loss,test_accuracy,staleness");
  EXPECT_EQ(deferred, "0.000,5,0,2.00000,0.4000,0") << "rows in the order of their stamps";
  // Relative to the first row, stamped 100 s before the rows written just before it (less the
  // time the writes took: a loaded machine takes milliseconds).
  EXPECT_NEAR(std::stod(first.substr(0, first.find(','))), 100.0, 5.0) << metrics;
  EXPECT_NE(third.find(",20,0,0.90000,0.8300,2"), std::string::npos) << metrics;
  EXPECT_FALSE(std::getline(lines, extra));  // the torn line was dropped
  EXPECT_FALSE(std::filesystem::exists(dir + "/worker-0.csv"));
  EXPECT_EQ(Slurp(dir + "/summary.json"),
            "{\"test_accuracy\":0.8300,\"eval_set\":\"test\",\"wall_s\":2.00,\"iterations\":20,"
            "\"workers\":2,"
            "\"samples_per_s\":1280.0,\"consistency\":\"ssp\",\"device\":\"cuda:0 (a GPU)\","
            "\"device_encoded_partitions\":6,\"step_s\":{\"pull\":0.001000,\"push_wait\":0.000000,"
            "\"compute\":0.002500,\"encode\":0.000500,\"clock\":0.001250},\"traffic_workers\":2,"
            "\"partition_pushes\":60,\"bytes_pushed\":1500,\"bytes_pulled\":4500,"
            "\"dropped_pushes\":1,\"mean_push_staleness\":0.7500,\"max_push_staleness\":5}\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/worker-0.traffic"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/worker-2.traffic"));
}

TEST(RunLogTest, AnEmptyDirectoryRecordsNothing) {
  auto log = RunLog::Open("", 3);
  ASSERT_TRUE(log.ok());
  log->Record(1, 3, 0.5, 0.5, 0);  // no file, no crash
}

}  // namespace
}  // namespace hetps
