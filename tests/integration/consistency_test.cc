// Consistency controllers on a live cluster: a straggler under each controller (real worker
// processes, one slowed with --slowdown), and a live switch while training runs.
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "tests/integration/local_cluster.h"
#include "worker/layer_schedule.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

struct WorkerReport {
  int64_t max_staleness = -1;
  double loop_s = -1;
  int64_t dropped = -1;
};

WorkerReport ReadReport(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  static const std::regex done(
      R"(done: .* in ([0-9.]+) s; read staleness max ([0-9]+) mean [0-9.]+; ([0-9]+) late)");
  std::smatch m;
  WorkerReport r;
  const std::string s = text.str();
  if (std::regex_search(s, m, done)) {
    r.loop_s = std::stod(m[1]);
    r.max_staleness = std::stoll(m[2]);
    r.dropped = std::stoll(m[3]);
  } else {
    ADD_FAILURE() << path << " has no summary line:\n" << s;
  }
  return r;
}

// Runs 3 worker processes (the last one 4x slower) under `consistency_flags`; returns their
// reports, slow one last.
std::vector<WorkerReport> RunWithStraggler(const std::vector<std::string>& consistency_flags) {
  LocalCluster cluster({.servers = 2, .workers = 3, .server_flags = consistency_flags});
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(
        cluster.StartWorker({"--iterations=30", "--compute_ms=4", "--tensor_elements=1000,50000",
                             "--progress_every=1000", i == 2 ? "--slowdown=4" : "--slowdown=1"},
                            cluster.Path("worker" + std::to_string(i))));
  }
  std::vector<WorkerReport> reports;
  for (int i = 0; i < 3; ++i) {
    auto st = workers[i]->WaitExit(60s);
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "worker " << i;
    reports.push_back(ReadReport(cluster.Path("worker" + std::to_string(i))));
  }
  return reports;
}

TEST(ConsistencyTest, BspReadsAreNeverStale) {
  for (const WorkerReport& r : RunWithStraggler({"--consistency=bsp"})) {
    EXPECT_EQ(r.max_staleness, 0);
  }
}

TEST(ConsistencyTest, SspStalenessStaysWithinS) {
  auto reports = RunWithStraggler({"--consistency=ssp:staleness=2"});
  int64_t worst = 0;
  for (const WorkerReport& r : reports) {
    EXPECT_LE(r.max_staleness, 2);
    worst = std::max(worst, r.max_staleness);
  }
  EXPECT_GT(worst, 0) << "the fast workers never ran ahead: the bound was not exercised";
}

TEST(ConsistencyTest, DsspStalenessStaysWithinItsUpperBound) {
  for (const WorkerReport& r : RunWithStraggler({"--consistency=dssp:lower=1,range=2"})) {
    EXPECT_LE(r.max_staleness, 1 + 2);
  }
}

TEST(ConsistencyTest, AspNeverHoldsTheFastWorkersBack) {
  auto reports = RunWithStraggler({"--consistency=asp"});
  for (int i = 0; i < 2; ++i) {
    // The straggler computes 4x longer; unblocked fast workers finish in well under half its time.
    EXPECT_LT(reports[i].loop_s, 0.5 * reports[2].loop_s)
        << "fast " << reports[i].loop_s << " s vs slow " << reports[2].loop_s << " s";
    EXPECT_GT(reports[i].max_staleness, 2);
  }
}

TEST(ConsistencyTest, BackupWorkersLeaveTheStragglerBehind) {
  auto reports = RunWithStraggler({"--consistency=backup:backups=1"});
  // Waiting for the straggler every step would take at least 30 x 16 ms of its compute; the
  // first N = 2 never wait for it. (The straggler itself skips to the open step, so it ends
  // early: its own time says nothing.)
  const double straggler_bound_s = 30 * 0.016;
  for (int i = 0; i < 2; ++i) EXPECT_LT(reports[i].loop_s, 0.8 * straggler_bound_s);
  EXPECT_GT(reports[2].dropped, 0) << "the straggler's late gradients must be dropped";
}

TEST(ConsistencyTest, SoftsyncRunsWithoutBlockingAndConverges) {
  auto reports = RunWithStraggler({"--consistency=softsync:n=1"});
  for (int i = 0; i < 2; ++i) EXPECT_LT(reports[i].loop_s, 0.5 * reports[2].loop_s);
}

TEST(ConsistencyTest, SemiAsyncRoundsDoNotWaitForTheStraggler) {
  auto reports = RunWithStraggler({"--consistency=semi_async:quorum=2,timeout_ms=50"});
  // Waiting for the straggler every round would cost at least its 30 x 16 ms of compute, and
  // as long as its own run on a loaded machine (its requests slow down like everyone's): the
  // bound is the larger, so a busy machine does not fail a run that never waited.
  const double straggler_bound_s = std::max(30 * 0.016, reports[2].loop_s);
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(reports[i].loop_s, 0.8 * straggler_bound_s)
        << "fast " << reports[i].loop_s << " s vs slow " << reports[2].loop_s << " s";
  }
}

TEST(ConsistencyTest, FedAvgAveragesEachRoundBySampleCount) {
  LocalCluster cluster({.servers = 1,
                        .workers = 2,
                        .server_flags = {"--consistency=bsp", "--aggregator=fedavg",
                                         "--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(2);
  LocalCluster::RunEach(2, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {4}, 0}}).ok());
  });
  LocalCluster::RunEach(2, [&](int i) {
    Client& c = *clients[i];
    // Rank 0 trained on 1 sample and moved by 8; rank 1 on 3 samples and moved by 4.
    std::vector<float> delta(4, c.rank() == 0 ? 8.0f : 4.0f);
    ASSERT_TRUE(c.Push("w", delta.data(), 4, /*weight=*/c.rank() == 0 ? 1 : 3).Wait().ok());
    ASSERT_TRUE(c.Clock().ok());
  });
  std::vector<float> w(4);
  ASSERT_TRUE(clients[0]->Pull("w", w.data(), 4).Wait().ok());
  EXPECT_EQ(w, std::vector<float>(4, -(1 * 8.0f + 3 * 4.0f) / 4));
  EXPECT_NE(cluster.Ctl("set consistency=asp"), 0) << "fedavg has no rounds under asp";
}

// FedLesScan's late results through the real scheduler and server (--late_rounds=1): round 0
// selects two clients and keeps the first upload; the second, reported after the close, is
// answered kept and joins round 1's step with weight samples * (0 + 1) / (1 + 1). Round 1's own
// second upload has no round left to join: not kept.
TEST(ConsistencyTest, SelectedRoundsTakeALateUploadIntoTheNextRoundsStep) {
  LocalCluster cluster({.servers = 1,
                        .workers = 3,
                        .scheduler_flags = {"--clients_per_round=1", "--overcommit=2", "--rounds=2",
                                            "--late_rounds=1"},
                        .server_flags = {"--consistency=selected", "--aggregator=fedavg",
                                         "--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(3);
  LocalCluster::RunEach(3, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {4}, 0}}).ok());
  });
  auto delta = [](int i, int64_t round) { return 10.0f * (i + 1) + static_cast<float>(round); };
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, std::vector<int>> pushed;  // by round: the clients that pushed, in order
  std::set<std::pair<int, int64_t>> go;        // (client, round) may report its upload
  std::map<std::pair<int, int64_t>, bool> kept;
  std::thread runner([&] {
    LocalCluster::RunEach(3, [&](int i) {
      Client& c = *clients[i];
      for (auto round = c.AwaitRound(); round.ok() && *round >= 0; round = c.AwaitRound()) {
        const std::vector<float> d(4, delta(i, *round));
        ASSERT_TRUE(c.Push("w", d.data(), 4, /*weight=*/i + 1).Wait().ok());
        std::unique_lock<std::mutex> lock(mu);
        pushed[*round].push_back(i);
        cv.notify_all();
        cv.wait(lock, [&] { return go.contains({i, *round}); });
        lock.unlock();
        auto k = c.FinishRound();
        ASSERT_TRUE(k.ok()) << k.status().ToString();
        lock.lock();
        kept[{i, *round}] = *k;
        cv.notify_all();
      }
    });
  });
  // Lets the clients that pushed for `round` report one after another; returns them in order.
  auto report_in_order = [&](int64_t round) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(
        cv.wait_for(lock, std::chrono::seconds(30), [&] { return pushed[round].size() == 2; }));
    const std::vector<int> order = pushed[round];
    for (int i : order) {
      go.insert({i, round});
      cv.notify_all();
      EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] {
        return kept.contains({i, round});
      }));
    }
    return order;
  };
  const std::vector<int> round0 = report_in_order(0);
  const std::vector<int> round1 = report_in_order(1);
  runner.join();
  ASSERT_EQ(round0.size(), 2u);
  ASSERT_EQ(round1.size(), 2u);
  EXPECT_TRUE((kept[{round0[0], 0}]));
  EXPECT_TRUE((kept[{round0[1], 0}])) << "late by one round: accepted";
  EXPECT_TRUE((kept[{round1[0], 1}]));
  EXPECT_FALSE((kept[{round1[1], 1}])) << "no round left to take it";
  const int a = round1[0], s = round0[1];
  const double na = a + 1, ns = (s + 1) * 0.5;
  const float expected =
      -delta(round0[0], 0) - static_cast<float>((na * delta(a, 1) + ns * delta(s, 0)) / (na + ns));
  std::vector<float> w(4);
  ASSERT_TRUE(clients[0]->Pull("w", w.data(), 4).Wait().ok());
  for (float v : w) EXPECT_FLOAT_EQ(v, expected);
  LocalCluster::RunEach(3, [&](int i) { EXPECT_TRUE(clients[i]->Finish().ok()); });
}

TEST(ConsistencyTest, TemporalLeavesDeepLayersAloneOffTheirRounds) {
  LocalCluster cluster(
      {.servers = 1,
       .workers = 2,
       .server_flags = {"--consistency=bsp", "--aggregator=temporal", "--init=zeros"}});
  auto clients = cluster.ConnectClients(2);
  const std::vector<TensorSpec> tensors = {{"shallow", {8}, 0}, {"deep", {8}, 1}};
  LocalCluster::RunEach(2, [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(tensors).ok()); });
  const LayerSchedule schedule(/*deep_from=*/1, /*period=*/3, /*deep_rounds=*/1);
  std::vector<std::vector<float>> deep_after(6, std::vector<float>(8));
  LocalCluster::RunEach(2, [&](int i) {
    Client& c = *clients[i];
    std::vector<float> w(8), delta(8, 1.0f);
    for (int64_t round = 0; round < 6; ++round) {
      for (const TensorSpec& t : tensors) {
        ASSERT_TRUE(c.Pull(t.name, w.data(), 8).Wait().ok());
        if (schedule.Uploads(t.layer, round)) {
          ASSERT_TRUE(c.Push(t.name, delta.data(), 8).Wait().ok());
        }
      }
      ASSERT_TRUE(c.Clock().ok());
      if (c.rank() == 0) {
        ASSERT_TRUE(c.Pull("deep", deep_after[round].data(), 8).Wait().ok());
      }
    }
  });
  // Deep uploads on rounds 0 and 3 only: the deep layer moves then and nowhere else.
  EXPECT_EQ(deep_after[0], std::vector<float>(8, -1.0f));
  EXPECT_EQ(deep_after[1], deep_after[0]);
  EXPECT_EQ(deep_after[2], deep_after[0]);
  EXPECT_EQ(deep_after[3], std::vector<float>(8, -2.0f));
  EXPECT_EQ(deep_after[5], deep_after[3]);
  std::vector<float> shallow(8);
  ASSERT_TRUE(clients[0]->Pull("shallow", shallow.data(), 8).Wait().ok());
  EXPECT_EQ(shallow, std::vector<float>(8, -6.0f));  // moved every round
}

float Grad(int w, int r, int64_t j) { return static_cast<float>((w + 1) * ((j + r) % 5 + 1)); }

TEST(ConsistencyTest, LiveSwitchLosesAndDuplicatesNothing) {
  const int kWorkers = 3, kRounds = 60;
  LocalCluster cluster(
      {.servers = 2,
       .workers = kWorkers,
       .scheduler_flags = {"--partition_bytes=65536"},
       .server_flags = {"--consistency=bsp", "--optimizer=sgd:lr=1", "--init=zeros"}});
  const std::vector<TensorSpec> tensors = {{"a", {10}, 0}, {"big", {100000}, 1}};
  auto clients = cluster.ConnectClients(kWorkers);
  LocalCluster::RunEach(kWorkers,
                        [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(tensors).ok()); });

  std::atomic<bool> straggler_done{false};
  std::thread training([&] {
    LocalCluster::RunEach(kWorkers, [&](int i) {
      Client& c = *clients[i];
      std::vector<std::vector<float>> g(tensors.size());
      for (int r = 0; r < kRounds; ++r) {
        for (size_t t = 0; t < tensors.size(); ++t) {
          g[t].resize(tensors[t].NumElements());
          for (int64_t j = 0; j < tensors[t].NumElements(); ++j) g[t][j] = Grad(c.rank(), r, j);
        }
        std::vector<float> scratch(100000);
        ASSERT_TRUE(c.Pull("big", scratch.data(), 100000).Wait().ok());  // no read deadlocks
        for (size_t t = 0; t < tensors.size(); ++t) {
          ASSERT_TRUE(c.Push(tensors[t].name, g[t].data(), tensors[t].NumElements()).Wait().ok());
        }
        if (c.rank() == 2) std::this_thread::sleep_for(8ms);  // a straggler
        ASSERT_TRUE(c.Clock().ok());
      }
      if (c.rank() == 2) straggler_done = true;
    });
  });
  // Switch back and forth while the workers are mid-run.
  for (const char* policy : {"consistency=asp", "consistency=ssp:staleness=1", "consistency=bsp"}) {
    std::this_thread::sleep_for(120ms);
    EXPECT_EQ(cluster.Ctl(std::string("set ") + policy), 0) << policy;
    EXPECT_FALSE(straggler_done.load()) << "training ended before the switch to " << policy;
  }
  EXPECT_NE(cluster.Ctl("set consistency=nonsense"), 0);
  training.join();

  LocalCluster::RunEach(kWorkers, [&](int i) { ASSERT_TRUE(clients[i]->Barrier().ok()); });
  for (const TensorSpec& t : tensors) {
    std::vector<float> values(t.NumElements());
    ASSERT_TRUE(clients[0]->Pull(t.name, values.data(), t.NumElements()).Wait().ok());
    for (int64_t j = 0; j < t.NumElements(); ++j) {
      float want = 0;
      for (int w = 0; w < kWorkers; ++w) {
        for (int r = 0; r < kRounds; ++r) want -= Grad(w, r, j);
      }
      ASSERT_EQ(values[j], want) << t.name << "[" << j << "]";
    }
  }
}

}  // namespace
}  // namespace hetps::testing
