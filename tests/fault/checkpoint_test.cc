// Whole-run checkpoints with real processes: under asp (workers at different clocks) and bsp,
// every cut taken while training runs (periodic ones and `hetps ctl checkpoint`) holds exactly
// the updates of the clocks before it on every server, no more and no fewer; a cluster resumed
// from a cut starts every worker at its clock with its model and ends where an uninterrupted
// run ends.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/cut.h"
#include "server/cut_file.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int kWorkers = 3;
constexpr int64_t kClocks = 120;
const std::vector<TensorSpec> kTensors = {{"a", {3000}, 0}, {"b", {100}, 1}};

// Each clock every worker pushes ones to every tensor (SGD, lr 1, zeros at start): after
// clock c every value is exactly -(workers * c).
void Train(Client& c, std::chrono::milliseconds pause) {
  std::vector<float> ones(3000, 1.0f);
  while (c.clock() < kClocks) {
    for (const TensorSpec& t : kTensors) {
      ASSERT_TRUE(c.Push(t.name, ones.data(), t.NumElements()).Wait().ok());
    }
    std::this_thread::sleep_for(pause);
    ASSERT_TRUE(c.Clock().ok());
  }
}

void ExpectPulled(Client& c, float want) {
  for (const TensorSpec& t : kTensors) {
    std::vector<float> v(t.NumElements());
    ASSERT_TRUE(c.Pull(t.name, v.data(), t.NumElements()).Wait().ok());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], want) << t.name << "[" << i << "]";
  }
}

// Every partition of the cut, on both servers, holds exactly -(workers * clock).
void ExpectCutExact(const std::string& cut, int servers) {
  auto manifest = ReadManifest(cut);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  const float want = -static_cast<float>(kWorkers * manifest->clock());
  int partitions = 0;
  for (int rank = 0; rank < servers; ++rank) {
    auto reader = CutReader::Open(cut, rank);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    for (int32_t id = 0; id < manifest->shard_map().partitions_size(); ++id) {
      const proto::PartitionInfo& p = manifest->shard_map().partitions(id);
      if (p.server_rank() != rank) continue;
      auto part = (*reader)->Read(id);
      ASSERT_TRUE(part.ok()) << part.status().ToString();
      ASSERT_EQ(part->values().size(), p.length() * sizeof(float));
      const float* v = reinterpret_cast<const float*>(part->values().data());
      for (int64_t i = 0; i < p.length(); ++i) {
        ASSERT_EQ(v[i], want) << cut << " partition " << id << "[" << i << "]";
      }
      ++partitions;
    }
  }
  EXPECT_EQ(partitions, manifest->shard_map().partitions_size());
}

std::vector<std::string> CompleteCuts(const std::string& dir) {
  std::vector<std::string> cuts;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (ReadManifest(e.path().string()).ok()) cuts.push_back(e.path().string());
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

class CheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointTest, CutsHoldExactlyTheClocksBeforeThemAndAResumedRunEndsTheSame) {
  ScratchDir checkpoints("hetps-checkpoints");
  const std::vector<std::string> servers = {"--consistency=" + GetParam(), "--optimizer=sgd:lr=1",
                                            "--init=zeros"};
  {
    LocalCluster cluster({.servers = 2,
                          .workers = kWorkers,
                          .scheduler_flags = {"--checkpoint_dir=" + checkpoints.str(),
                                              "--checkpoint_every_clocks=40",
                                              "--keep_checkpoints=0", "--partition_bytes=4096"},
                          .server_flags = servers});
    auto clients = cluster.ConnectClients(kWorkers);
    std::thread training([&] {
      LocalCluster::RunEach(kWorkers, [&](int i) {
        ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
        Train(*clients[i], std::chrono::milliseconds(1 + i));  // asp: they drift apart
      });
    });
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(cluster.Ctl("checkpoint"), 0);
    training.join();
    LocalCluster::RunEach(kWorkers, [&](int i) { ASSERT_TRUE(clients[i]->Barrier().ok()); });
    ExpectPulled(*clients[0], -static_cast<float>(kWorkers * kClocks));
    for (auto& c : clients) ASSERT_TRUE(c->Finish().ok());
  }
  const std::vector<std::string> cuts = CompleteCuts(checkpoints.str());
  // Clocks 40 and 80, and the one asked for (its `hetps ctl` succeeded above), which is a third
  // unless the workers had just reached 40 or 80 when it was asked for.
  ASSERT_GE(cuts.size(), 2u) << "clocks 40 and 80, and the one asked for";
  for (const std::string& cut : cuts) ExpectCutExact(cut, 2);

  // Resume from the first cut: workers start at its clock with its model and finish the run.
  const std::string cut = cuts.front();
  const int64_t clock = ReadManifest(cut)->clock();
  LocalCluster resumed({.servers = 2,
                        .workers = kWorkers,
                        .scheduler_flags = {"--resume_from=" + cut, "--partition_bytes=4096"},
                        .server_flags = [&] {
                          auto flags = servers;
                          flags.push_back("--restore_from=" + cut);
                          return flags;
                        }()});
  auto clients = resumed.ConnectClients(kWorkers);
  LocalCluster::RunEach(kWorkers, [&](int i) {
    EXPECT_EQ(clients[i]->clock(), clock);
    ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
  });
  ExpectPulled(*clients[0], -static_cast<float>(kWorkers * clock));
  LocalCluster::RunEach(kWorkers, [&](int i) { Train(*clients[i], 0ms); });
  LocalCluster::RunEach(kWorkers, [&](int i) { ASSERT_TRUE(clients[i]->Barrier().ok()); });
  ExpectPulled(*clients[0], -static_cast<float>(kWorkers * kClocks));
}

INSTANTIATE_TEST_SUITE_P(Consistency, CheckpointTest, ::testing::Values("asp", "bsp"));

// A sparse table's rows are in the cut with the dense tensors: resumed from a cut at clock 40,
// every row holds exactly the pushes of the clocks before it, and training goes on from there.
TEST(CheckpointTest, ASparseTablesRowsResumeFromACut) {
  ScratchDir checkpoints("hetps-checkpoints");
  const std::vector<std::string> servers = {"--consistency=bsp", "--optimizer=sgd:lr=1"};
  const std::vector<TensorSpec> model = {{"emb", {2}, 0, {.dim = 2, .init = "zeros"}}};
  std::vector<uint64_t> keys(50);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = k * 0x9e3779b97f4a7c15ULL;
  const std::vector<float> ones(keys.size() * 2, 1.0f);
  auto train = [&](Client& c, int64_t until) {
    while (c.clock() < until) {
      ASSERT_TRUE(c.PushRows("emb", keys.data(), 50, ones.data()).Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
    }
  };
  auto expect_rows = [&](Client& c, float want) {
    std::vector<float> rows(keys.size() * 2);
    ASSERT_TRUE(c.PullRows("emb", keys.data(), 50, rows.data()).Wait().ok());
    for (float v : rows) ASSERT_EQ(v, want);
  };
  {
    LocalCluster cluster(
        {.servers = 2,
         .workers = 2,
         .scheduler_flags = {"--checkpoint_dir=" + checkpoints.str(),
                             "--checkpoint_every_clocks=40", "--keep_checkpoints=0"},
         .server_flags = servers});
    auto clients = cluster.ConnectClients(2);
    LocalCluster::RunEach(2, [&](int i) {
      ASSERT_TRUE(clients[i]->DeclareTensors(model).ok());
      train(*clients[i], 60);
      ASSERT_TRUE(clients[i]->Barrier().ok());
    });
    expect_rows(*clients[0], -120);
  }
  const std::vector<std::string> cuts = CompleteCuts(checkpoints.str());
  ASSERT_FALSE(cuts.empty());
  const int64_t clock = ReadManifest(cuts.front())->clock();
  ASSERT_EQ(clock, 40);
  LocalCluster resumed({.servers = 2,
                        .workers = 2,
                        .scheduler_flags = {"--resume_from=" + cuts.front()},
                        .server_flags = [&] {
                          auto flags = servers;
                          flags.push_back("--restore_from=" + cuts.front());
                          return flags;
                        }()});
  auto clients = resumed.ConnectClients(2);
  LocalCluster::RunEach(2, [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(model).ok()); });
  expect_rows(*clients[0], -80);
  LocalCluster::RunEach(2, [&](int i) {
    train(*clients[i], 60);
    ASSERT_TRUE(clients[i]->Barrier().ok());
  });
  expect_rows(*clients[0], -120);
}

// A resumed run must declare the checkpoint's model: another one is refused by name.
TEST(CheckpointTest, ResumingWithAnotherModelIsRefused) {
  ScratchDir checkpoints("hetps-checkpoints");
  {
    LocalCluster cluster({.servers = 1,
                          .workers = 1,
                          .scheduler_flags = {"--checkpoint_dir=" + checkpoints.str()},
                          .server_flags = {"--init=zeros"}});
    auto clients = cluster.ConnectClients(1);
    ASSERT_TRUE(clients[0]->DeclareTensors(kTensors).ok());
    ASSERT_TRUE(clients[0]->Clock().ok());
    EXPECT_EQ(cluster.Ctl("checkpoint"), 0);
    ASSERT_TRUE(clients[0]->Finish().ok());
  }
  auto cut = LatestCut(checkpoints.str());
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  LocalCluster resumed({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--resume_from=" + *cut},
                        .server_flags = {"--init=zeros", "--restore_from=" + *cut}});
  auto clients = resumed.ConnectClients(1);
  Status s = clients[0]->DeclareTensors({{"other", {10}, 0}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not the one of checkpoint"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hetps::testing
