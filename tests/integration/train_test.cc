// Real training on the real data: worker processes train the MLP on Fashion-MNIST (installed by
// deploy/install_deps.sh) through a live cluster.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"
#include "worker/train/model.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// Runs `workers` trainer processes with `flags`; returns their outputs.
std::vector<std::string> Train(
    int servers, int workers, const std::vector<std::string>& flags,
    std::vector<std::string> server_flags = {"--consistency=ssp:staleness=2",
                                             "--optimizer=adam:lr=0.001", "--init=worker"},
    std::vector<std::string> scheduler_flags = {}) {
  LocalCluster cluster({.servers = servers,
                        .workers = workers,
                        .scheduler_flags = std::move(scheduler_flags),
                        .server_flags = std::move(server_flags)});
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> f = {"--workload=train", "--progress_every=100000"};
    f.insert(f.end(), flags.begin(), flags.end());
    procs.push_back(cluster.StartWorker(f, cluster.Path("trainer" + std::to_string(i))));
  }
  std::vector<std::string> out;
  for (int i = 0; i < workers; ++i) {
    // About 15 s for the CNN normally; ten times that under the sanitizers beside other tests.
    auto st = procs[i]->WaitExit(240s);
    out.push_back(Slurp(cluster.Path("trainer" + std::to_string(i))));
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << out.back();
  }
  return out;
}

// The final test accuracy rank 0 reports; no other worker evaluates.
double FinalAccuracy(const std::vector<std::string>& out) {
  static const std::regex final_line(R"(final test accuracy ([0-9.]+))");
  int reports = 0;
  double accuracy = -1;
  for (const std::string& o : out) {
    std::smatch m;
    if (!std::regex_search(o, m, final_line)) continue;
    ++reports;
    accuracy = std::stod(m[1]);
  }
  EXPECT_EQ(reports, 1) << "exactly one worker (rank 0) evaluates";
  return accuracy;
}

void ExpectFinalAccuracyAbove(const std::vector<std::string>& out, double floor) {
  EXPECT_GT(FinalAccuracy(out), floor) << out[0] << out[1];
}

// Payload bytes every worker pushed, and the same as float32.
std::pair<int64_t, int64_t> PushedBytes(const std::vector<std::string>& out) {
  static const std::regex line(R"(pushed ([0-9]+) bytes \(([0-9]+) as float32)");
  std::pair<int64_t, int64_t> total = {0, 0};
  for (const std::string& o : out) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(o, m, line)) << o;
    if (m.empty()) continue;
    total.first += std::stoll(m[1]);
    total.second += std::stoll(m[2]);
  }
  return total;
}

TEST(TrainTest, MlpOnFashionMnistExceedsEightyPercent) {
  ExpectFinalAccuracyAbove(Train(2, 2, {"--iterations=300", "--eval_every=300", "--data_seed=3"}),
                           0.80);
}

TEST(TrainTest, CnnOnFashionMnistExceedsEightyPercent) {
  auto out = Train(
      2, 2,
      {"--model=cnn", "--device=cpu", "--iterations=300", "--eval_every=300", "--data_seed=3"});
  ExpectFinalAccuracyAbove(out, 0.80);
  EXPECT_NE(out[0].find("compute on the CPU"), std::string::npos) << out[0];
}

// The quickstart's training while the cluster changes under it (--max_servers,
// docs/resharding.md): at iteration 500 a third server joins and partitions move to it; at
// 1000 rank 0 is drained (its partitions move to the others, its server exits). The model
// trains to the quickstart's accuracy all the same.
TEST(TrainTest, AServerAddedAndOneDrainedMidTrainingKeepTheQuickstartAccuracy) {
  LocalCluster cluster({.servers = 2,
                        .workers = 2,
                        .scheduler_flags = {"--max_servers=3", "--partition_bytes=65536"},
                        .server_flags = {"--consistency=ssp:staleness=2",
                                         "--optimizer=adam:lr=0.001", "--init=worker"}});
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < 2; ++i) {
    procs.push_back(
        cluster.StartWorker({"--workload=train", "--iterations=1500", "--batch=64",
                             "--eval_every=1500", "--progress_every=250", "--data_seed=3"},
                            cluster.Path("trainer" + std::to_string(i))));
  }
  auto wait_for = [&](const std::string& line) {
    for (int i = 0; i < 2400; ++i) {  // 240 s at most
      if (Slurp(cluster.Path("trainer0")).find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  ASSERT_TRUE(wait_for("iter 500/")) << Slurp(cluster.Path("trainer0"));
  const int added = cluster.StartServer();
  ASSERT_GE(added, 0);
  ASSERT_TRUE(wait_for("iter 1000/")) << Slurp(cluster.Path("trainer0"));
  EXPECT_EQ(cluster.Ctl("drain-server --rank=0"), 0);
  std::vector<std::string> out;
  for (int i = 0; i < 2; ++i) {
    auto st = procs[i]->WaitExit(240s);
    out.push_back(Slurp(cluster.Path("trainer" + std::to_string(i))));
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << out.back();
  }
  const double accuracy = FinalAccuracy(out);
  std::printf("final test accuracy %.4f with a server added and one drained\n", accuracy);
  EXPECT_GE(accuracy, 0.85) << out[0];
}

// Two runs to compare: bsp makes each deterministic; plain SGD, since Adam's per-coordinate
// scaling magnifies sparse updates.
const std::vector<std::string> kComparedServers = {"--consistency=bsp", "--optimizer=sgd:lr=0.1",
                                                   "--init=worker"};
const std::vector<std::string> kComparedRun = {"--iterations=600", "--eval_every=600",
                                               "--data_seed=3"};

// Top-k at 1% with error feedback: within 1.5 points of uncompressed training after the same
// iterations, pushing >= 30x fewer bytes.
TEST(TrainTest, TopKWithErrorFeedbackMatchesUncompressedWithThirtyTimesFewerBytes) {
  auto compressed_flags = kComparedRun;
  compressed_flags.push_back("--codec=topk:density=0.01,ef=1");
  const auto plain = Train(2, 2, kComparedRun, kComparedServers);
  const auto compressed = Train(2, 2, compressed_flags, kComparedServers);
  const double a = FinalAccuracy(plain), b = FinalAccuracy(compressed);
  EXPECT_GT(a, 0.8);
  EXPECT_NEAR(b, a, 0.015);
  const auto [sent, raw] = PushedBytes(compressed);
  EXPECT_EQ(PushedBytes(plain).first, raw);
  EXPECT_GE(static_cast<double>(raw) / sent, 30.0) << sent << " of " << raw;
}

// The device-resident path: gradients stay on the GPU and each partition is encoded there by
// the CUDA twin of its codec. The same deterministic run as on the CPU lands within rounding
// of it (the two devices sum in different orders).
TEST(TrainTest, CudaTrainingEncodesOnTheDeviceAndMatchesTheCpu) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << "no GPU: " << why;
  auto cpu_flags = kComparedRun, cuda_flags = kComparedRun;
  for (auto* f : {&cpu_flags, &cuda_flags}) f->push_back("--codec=topk:density=0.01,ef=1");
  cpu_flags.push_back("--device=cpu");
  cuda_flags.push_back("--device=cuda");
  const auto cpu = Train(2, 2, cpu_flags, kComparedServers);
  const auto cuda = Train(2, 2, cuda_flags, kComparedServers);
  const double a = FinalAccuracy(cpu), b = FinalAccuracy(cuda);
  EXPECT_GT(a, 0.8);
  EXPECT_NEAR(b, a, 0.015);
  static const std::regex encoded(
      R"(computed on cuda:[0-9]+ .* and encoded ([0-9]+) partitions there)");
  for (const std::string& out : cuda) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, encoded)) << out;
    EXPECT_GT(std::stoi(m[1]), 0) << out;
  }
  EXPECT_EQ(PushedBytes(cuda), PushedBytes(cpu));
}

// Two CUDA workers of one host: each takes GPU (local rank mod the visible GPUs; here the local
// rank is the rank), and under the scheduler's layer-wise schedule the device accumulates the
// skipped steps (cuBLAS axpy) and the run matches the CPU's, pushing less than every step would.
TEST(TrainTest, CudaWorkersTakeTheirLocalRanksGpuAndFollowTheLayerSchedule) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << "no GPU: " << why;
  auto cpu_flags = kComparedRun, cuda_flags = kComparedRun;
  cpu_flags.push_back("--device=cpu");
  cuda_flags.push_back("--device=cuda");
  const std::vector<std::string> schedule = {"--layer_schedule=fixed:deep=3,deep_from=1"};
  const auto every = Train(2, 2, cpu_flags, kComparedServers);
  const auto cpu = Train(2, 2, cpu_flags, kComparedServers, schedule);
  const auto cuda = Train(2, 2, cuda_flags, kComparedServers, schedule);
  EXPECT_NEAR(FinalAccuracy(cuda), FinalAccuracy(cpu), 0.015);
  EXPECT_GT(FinalAccuracy(cuda), 0.75);
  EXPECT_LT(PushedBytes(cuda).first, PushedBytes(every).first * 0.95) << "layers 1.. every 3rd";
  EXPECT_LT(PushedBytes(cpu).first, PushedBytes(every).first * 0.95);
  // The schedule comes with the shard map: every step follows it, on either device.
  EXPECT_EQ(PushedBytes(cuda), PushedBytes(cpu));
  // The scheduler numbers workers in the order they register, not the order they started: the
  // two processes hold local ranks 0 and 1 in either order.
  static const std::regex gpu(R"(local rank ([0-9]+) takes GPU ([0-9]+) of the ([0-9]+) visible)");
  std::set<int> local_ranks;
  for (const std::string& out : cuda) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, gpu)) << out;
    local_ranks.insert(std::stoi(m[1]));
    EXPECT_EQ(std::stoi(m[2]), std::stoi(m[1]) % std::stoi(m[3])) << out;
  }
  EXPECT_EQ(local_ranks, (std::set<int>{0, 1}));
}

TEST(TrainTest, DirichletSplitFinishesAndReportsItsLabelSkew) {
  auto out = Train(
      1, 2,
      {"--iterations=60", "--eval_every=60", "--partition=dirichlet", "--dirichlet_alpha=0.2"});
  static const std::regex hist(R"(trains on ([0-9]+) samples, labels \[([0-9 ]+)\])");
  int64_t samples = 0;
  std::vector<std::vector<int64_t>> counts;
  for (const std::string& o : out) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(o, m, hist)) << o;
    samples += std::stoll(m[1]);
    std::istringstream line(m[2]);
    counts.emplace_back();
    for (int64_t v; line >> v;) counts.back().push_back(v);
    ASSERT_EQ(counts.back().size(), 10u);
  }
  // Per class, the share held by the worker with more of it: about 0.5 for an iid split.
  double majority = 0;
  for (int c = 0; c < 10; ++c) {
    majority += static_cast<double>(std::max(counts[0][c], counts[1][c])) /
                static_cast<double>(counts[0][c] + counts[1][c]);
  }
  EXPECT_GT(majority / 10, 0.75) << "alpha 0.2 should skew the labels";
  EXPECT_EQ(samples, 60000);  // the two parts cover the training set
}

// deploy/ctr.flags, shortened: click-through rate over 26 sparse tables on two servers, its AUC
// within a few points of the teacher's (the best achievable) and its run folder written.
TEST(TrainTest, CtrOverSparseTablesLearnsCloseToItsTeacher) {
  ScratchDir dir("hetps-ctr");
  const std::string cmd = Bin("hetps") + " launch --servers 2 --workers 2 --flagfile " +
                          HETPS_SOURCE_DIR
                          "/deploy/ctr.flags --iterations=200 --eval_every=100 "
                          "--ctr_test_samples=5000 --run_dir=" +
                          dir.str() + " > " + dir.str() + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(dir.str() + ".log");
  const std::string log = Slurp(dir.str() + ".log");
  std::remove((dir.str() + ".log").c_str());
  static const std::regex final_line(R"(final test AUC (0\.[0-9]+) \(teacher (0\.[0-9]+)\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, final_line)) << log;
  const double auc = std::stod(m[1]), teacher = std::stod(m[2]);
  std::printf("ctr: test AUC %.4f, teacher %.4f\n", auc, teacher);
  EXPECT_GT(teacher, 0.85);
  EXPECT_GE(auc, teacher - 0.08) << log;
  const std::string summary = Slurp(dir.str() + "/summary.json");
  for (const char* key :
       {"\"model\":\"ctr\"", "\"auc\":0.", "\"logloss\":0.", "\"teacher_auc\":0."}) {
    EXPECT_NE(summary.find(key), std::string::npos) << key << " in " << summary;
  }
  const std::string metrics = Slurp(dir.str() + "/metrics.csv");
  EXPECT_EQ(metrics.rfind("wall_s,clock,worker,loss,test_accuracy,staleness\n", 0), 0u);
  EXPECT_GT(Slurp(dir.str() + "/plot.png").size(), 1000u);
}

TEST(TrainTest, LaunchWritesTheRunFolder) {
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / ("hetps-run-" + std::to_string(getpid())))
          .lexically_normal()
          .string();
  std::filesystem::remove_all(dir);
  struct Cleanup {  // the run folder and the log go away also when an assertion fails
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      std::filesystem::remove(dir + ".log", ec);
    }
  } cleanup{dir};
  const std::string cmd = Bin("hetps") + " launch --servers 1 --workers 2 --run_dir=" + dir +
                          " --workload=train --consistency=bsp --optimizer=adam:lr=0.001"
                          " --init=worker --iterations=40 --eval_every=20 > " +
                          dir + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(dir + ".log");
  // Every role ran with the run's own keys (secure by default) and the flags given.
  const std::string flags = Slurp(dir + "/flags.txt");
  for (const char* role : {"scheduler", "server", "worker"}) {
    EXPECT_NE(flags.find(std::string(role) + ": --auth=curve --keys=" + dir + "/keys"),
              std::string::npos)
        << flags;
  }
  EXPECT_NE(flags.find("--consistency=bsp"), std::string::npos) << flags;
  const std::string metrics = Slurp(dir + "/metrics.csv");
  EXPECT_EQ(metrics.rfind("wall_s,clock,worker,loss,test_accuracy,staleness\n", 0), 0u);
  EXPECT_GE(std::count(metrics.begin(), metrics.end(), '\n'), 1 + 2 * 4);  // every 10 clocks
  static const std::regex summary(
      R"(\{"test_accuracy":0\.[0-9]+,"eval_set":"test","wall_s":[0-9.]+,"iterations":40,"workers":2,)"
      R"("samples_per_s":[0-9.]+,"consistency":"bsp","device":"[^"]+",)"
      R"("device_encoded_partitions":[0-9]+,"step_s":\{"pull":[0-9.]+,"push_wait":[0-9.]+,)"
      R"("compute":[0-9.]+,"encode":[0-9.]+,"clock":[0-9.]+\},"traffic_workers":2,)"
      R"("partition_pushes":[1-9][0-9]*,"bytes_pushed":[1-9][0-9]*,"bytes_pulled":[1-9][0-9]*,)"
      R"("dropped_pushes":0,"mean_push_staleness":[0-9.]+,"max_push_staleness":[0-9]+\})");
  EXPECT_TRUE(std::regex_search(Slurp(dir + "/summary.json"), summary))
      << Slurp(dir + "/summary.json");
  const std::string png = Slurp(dir + "/plot.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_NE(Slurp(dir + ".log").find("run folder " + dir), std::string::npos);
}

}  // namespace
}  // namespace hetps::testing
