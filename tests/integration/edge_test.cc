// Federated edge clients as real processes (hetps-worker --workload=edge) on a live cluster,
// checked against the same local training replayed in this process: FedAvg's rounds must give
// exactly the sample-weighted mean of the clients' local models.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "tests/integration/fed_bench.h"
#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"
#include "worker/edge/local_training.h"
#include "worker/train/model.h"
#include "worker/train/partitioner.h"
#include "worker/train/shared_images.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// An edge client's flags on the test's small image set (8 hidden units), plus `extra`.
std::vector<std::string> EdgeFlags(const LocalCluster& cluster, const std::string& images,
                                   const std::string& labels, std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--workload=edge",
                                    "--hidden=8",
                                    "--train_images=" + images,
                                    "--train_labels=" + labels,
                                    "--test_images=" + images,
                                    "--test_labels=" + labels,
                                    "--data_cache=" + cluster.Path("cache")};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Starts one edge client per rank with flags(rank), each writing to <cluster>/client<rank>,
// runs `meanwhile` (if any), waits for them all to exit 0, and returns what they printed.
std::string RunClients(LocalCluster& cluster, int n,
                       const std::function<std::vector<std::string>(int)>& flags,
                       const std::function<void()>& meanwhile = {}) {
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < n; ++i) {
    procs.push_back(cluster.StartWorker(flags(i), cluster.Path("client" + std::to_string(i))));
  }
  if (meanwhile) meanwhile();
  std::string outputs;
  for (int i = 0; i < n; ++i) {
    auto st = procs[i]->WaitExit(120s);
    const std::string out = Slurp(cluster.Path("client" + std::to_string(i)));
    outputs += out;
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << out;
  }
  return outputs;
}

std::vector<int> Ints(const std::string& text) {
  std::vector<int> v;
  std::istringstream in(text);
  for (int x; in >> x;) v.push_back(x);
  return v;
}

// rounds.csv of the scheduler: per aggregation the ranks whose uploads it kept and those of the
// uploads dropped since the previous one (a round's selected clients are both together).
struct RoundRow {
  std::vector<int> kept, dropped;
  std::vector<int> Selected() const {
    std::vector<int> all = kept;
    all.insert(all.end(), dropped.begin(), dropped.end());
    return all;
  }
};
std::vector<RoundRow> ReadRounds(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line,
            "aggregation,wall_s,kept,dropped,staleness_mean,staleness_max,bytes_up,bytes_down,"
            "test_loss,test_accuracy,kept_ranks,dropped_ranks,late,host_s,epsilon,clip");
  std::vector<RoundRow> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    // host_s is empty under wall time, epsilon and clip without --dp (the last empty cells are
    // no cells)
    EXPECT_EQ(cells.size(), 15u) << line;
    if (cells.size() != 15) break;
    EXPECT_EQ(std::stoi(cells[0]), static_cast<int>(rows.size()) + 1) << line;
    rows.push_back({Ints(cells[10]), Ints(cells[11])});
  }
  return rows;
}

Params ReadModel(const std::string& path, const Params& shape) {
  std::ifstream in(path, std::ios::binary);
  Params p = shape;
  for (auto& t : p) {
    in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.size() * 4));
  }
  EXPECT_TRUE(in.good()) << "model file " << path << " is short";
  EXPECT_EQ(in.peek(), EOF) << "model file " << path << " is longer than the model";
  return p;
}

// The edge clients' local training replayed in this process: the same data, model, initial
// weights and seeded sample orders (client k's is seeded seed * 1000003 + k, as the client's).
class Replay {
 public:
  Replay(const std::string& images, const std::string& labels, const std::string& cache,
         uint64_t seed, int clients, const LocalTraining& local)
      : local_(local) {
    auto data = SharedImages::Open(images, labels, cache);
    EXPECT_TRUE(data.ok()) << data.status().ToString();
    data_.emplace(std::move(*data));
    auto arch = BuildArchitecture("mlp", {1, 6, 6}, 10, {8});
    EXPECT_TRUE(arch.ok());
    model_ = MakeCpuModel(std::move(*arch));
    global = model_->Init(seed);
    start = global;
    grads_ = model_->Zeros();
    for (int k = 0; k < clients; ++k) rngs_.emplace_back(seed * 1000003 + k);
  }
  const SharedImages& data() const { return *data_; }
  void Split(std::vector<std::vector<int64_t>> parts) { parts_ = std::move(parts); }
  // Client k trains from the global model; returns its local model and its sample count.
  std::pair<Params, double> Train(int k) {
    const Dataset shard = data_->Gather(parts_[k]);
    Params w = global;
    EXPECT_TRUE(TrainLocally(*model_, shard, local_, global, w, grads_, rngs_[k]).ok());
    return {std::move(w), static_cast<double>(shard.size)};
  }
  // Every client in `trained` trains; the tensors `update` names (all when empty) become the
  // sample-weighted mean of the local models of the clients in `kept`.
  void WeightedMean(const std::vector<int>& trained, const std::vector<int>& kept,
                    const std::vector<size_t>& update = {}) {
    std::vector<std::vector<double>> sum(global.size());
    for (size_t t = 0; t < global.size(); ++t) sum[t].assign(global[t].size(), 0);
    double samples = 0;
    for (int k : trained) {
      auto [w, n] = Train(k);
      if (std::find(kept.begin(), kept.end(), k) == kept.end()) continue;
      for (size_t t = 0; t < w.size(); ++t) {
        for (size_t i = 0; i < w[t].size(); ++i) sum[t][i] += n * double{w[t][i]};
      }
      samples += n;
    }
    if (samples == 0) return;  // nobody kept: nothing changes
    for (size_t t = 0; t < global.size(); ++t) {
      if (!update.empty() && std::find(update.begin(), update.end(), t) == update.end()) continue;
      for (size_t i = 0; i < global[t].size(); ++i) {
        global[t][i] = static_cast<float>(sum[t][i] / samples);
      }
    }
  }
  // The largest difference between the model a run wrote (model.bin) and `global`.
  double MaxDiffTo(const std::string& model_bin) const {
    const Params served = ReadModel(model_bin, global);
    double max_diff = 0;
    for (size_t t = 0; t < global.size(); ++t) {
      for (size_t i = 0; i < global[t].size(); ++i) {
        max_diff = std::max(max_diff, double{std::abs(served[t][i] - global[t][i])});
      }
    }
    return max_diff;
  }

  Params global, start;

 private:
  LocalTraining local_;
  std::optional<SharedImages> data_;
  std::unique_ptr<Model> model_;
  Params grads_;
  std::vector<std::mt19937_64> rngs_;
  std::vector<std::vector<int64_t>> parts_;
};

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int> Ranks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

TEST(EdgeTest, FedAvgRoundsGiveTheSampleWeightedMeanOfTheLocalModels) {
  constexpr int kClients = 4, kRounds = 3;
  constexpr uint64_t kSeed = 3;
  LocalCluster cluster({.servers = 2,
                        .workers = kClients,
                        .server_flags = {"--consistency=bsp", "--aggregator=fedavg",
                                         "--optimizer=sgd:lr=1", "--init=worker"}});
  const std::string images = cluster.Path("train-images.gz"),
                    labels = cluster.Path("train-labels.gz");
  WriteData(images, labels, 240, 11);
  const std::string run_dir = cluster.Path("run");
  const LocalTraining local{.epochs = 2, .batch = 16, .lr = 0.1};
  const std::string outputs = RunClients(cluster, kClients, [&](int) -> std::vector<std::string> {
    return EdgeFlags(cluster, images, labels,
                     {"--rounds=" + std::to_string(kRounds), "--local_epochs=2", "--batch=16",
                      "--local_lr=0.1", "--partition=shards", "--shards_per_client=2",
                      "--data_seed=3", "--eval_every=1", "--run_dir=" + run_dir});
  });
  EXPECT_NE(outputs.find("final test accuracy"), std::string::npos) << outputs;

  // The same rounds, replayed here: every client trains from the global model with its own
  // seeded sample order, and the new global model is the sample-weighted mean.
  Replay replay(images, labels, cluster.Path("cache-replay"), kSeed, kClients, local);
  replay.Split(PartitionShards(replay.data().labels(), kClients, 2, kSeed));
  for (int r = 0; r < kRounds; ++r) replay.WeightedMean(Ranks(kClients), Ranks(kClients));
  EXPECT_LT(replay.MaxDiffTo(run_dir + "/model.bin"), 1e-5)
      << "the served model is not the weighted mean of the local models";
  double max_moved = 0;
  for (size_t t = 0; t < replay.global.size(); ++t) {
    for (size_t i = 0; i < replay.global[t].size(); ++i) {
      max_moved = std::max(max_moved, double{std::abs(replay.global[t][i] - replay.start[t][i])});
    }
  }
  EXPECT_GT(max_moved, 1e-2) << "training moved nothing: the check would be empty";
}

// Layer-wise uploads (ALGORITHMS.md §5) with the temporally weighted aggregation: with the
// deep layer (fc1) sent only on rounds t with t mod 3 = 0, 3 bsp rounds leave fc1 as round 0
// made it, while fc0 moves every round; all clients upload at every round they upload, so each
// aggregation is the sample-weighted mean of what arrived (a = e/2 weights are equal).
TEST(EdgeTest, LayerWiseUploadsSendDeepLayersOnlyOnTheirRounds) {
  constexpr int kClients = 3, kRounds = 3;
  constexpr uint64_t kSeed = 4;
  LocalCluster cluster(
      {.servers = 2,
       .workers = kClients,
       .server_flags = {"--consistency=bsp", "--aggregator=temporal", "--init=worker"}});
  const std::string images = cluster.Path("train-images.gz"),
                    labels = cluster.Path("train-labels.gz");
  WriteData(images, labels, 180, 19);
  const std::string run_dir = cluster.Path("run");
  const LocalTraining local{.epochs = 1, .batch = 16, .lr = 0.1};
  const std::string outputs = RunClients(cluster, kClients, [&](int i) -> std::vector<std::string> {
    return EdgeFlags(
        cluster, images, labels,
        {"--rank=" + std::to_string(i), "--rounds=" + std::to_string(kRounds), "--local_epochs=1",
         "--batch=16", "--local_lr=0.1", "--partition=iid", "--data_seed=4", "--deep_from=1",
         "--deep_period=3", "--deep_rounds=1", "--run_dir=" + run_dir});
  });
  // Bytes up per client: Init of the whole model once (386 floats), fc0 (296 floats) every
  // round, fc1 (90 floats) only in round 0.
  const int64_t expected = 4 * (386 + kRounds * 296 + 90);
  for (int i = 0; i < kClients; ++i) {
    EXPECT_NE(outputs.find(fmt::format("client {}: {} rounds on", i, kRounds)), std::string::npos);
    EXPECT_NE(outputs.find(fmt::format("{} bytes up", expected)), std::string::npos) << outputs;
  }

  Replay replay(images, labels, cluster.Path("cache-replay"), kSeed, kClients, local);
  replay.Split(PartitionIid(replay.data().size(), kClients, kSeed));
  // fc0.w, fc0.b (layer 0) every round; fc1.w, fc1.b (layer 1) on round 0 only.
  for (int r = 0; r < kRounds; ++r) {
    replay.WeightedMean(Ranks(kClients), Ranks(kClients),
                        r % 3 == 0 ? std::vector<size_t>{} : std::vector<size_t>{0, 1});
  }
  EXPECT_LT(replay.MaxDiffTo(run_dir + "/model.bin"), 1e-5)
      << "the served model is not the layer-wise temporal aggregation";
}

// Waits (at most 30 s) until the rounds log has `rows` rows.
bool WaitRows(const std::string& csv_path, size_t rows);

struct SampledRun {
  std::vector<std::string> scheduler_flags, client_flags;
  int rounds_to_run = 3;
  // The rounds' shape: K uploads kept of ceil(K x overcommit) selected, and the servers'.
  int per_round = 5;
  double overcommit = 1.4;
  std::vector<std::string> server_flags = {"--consistency=selected", "--aggregator=fedavg",
                                           "--optimizer=sgd:lr=1", "--init=worker"};
  // Runs while the clients do, given the cluster and the rounds log's path.
  std::function<void(LocalCluster&, const std::string&)> during;
  std::string outputs;           // every client's output
  std::vector<RoundRow> rounds;  // the scheduler's rounds.csv
};

// SIGKILLs the scheduler once the rounds log has `rows` rows and starts it again on its data
// dir `down` later.
std::function<void(LocalCluster&, const std::string&)> KillSchedulerAfter(
    size_t rows, std::chrono::milliseconds down) {
  return [rows, down](LocalCluster& cluster, const std::string& csv) {
    ASSERT_TRUE(WaitRows(csv, rows)) << "the rounds log never had " << rows << " rows";
    cluster.scheduler().Signal(SIGKILL);
    ASSERT_TRUE(cluster.scheduler().WaitExit(5s).has_value());
    std::this_thread::sleep_for(down);
    cluster.RestartScheduler();
  };
}

void RunSampledFedAvg(SampledRun& run) {
  constexpr int kClients = 20;
  const int kPerRound = run.per_round;
  const int kRounds = run.rounds_to_run;
  constexpr uint64_t kSeed = 5;
  ScratchDir logs("edge_test");
  std::filesystem::create_directories(logs.path());
  const std::string rounds_csv = (logs.path() / "rounds.csv").string();
  std::vector<std::string> scheduler_flags = {"--clients_per_round=" + std::to_string(kPerRound),
                                              fmt::format("--overcommit={:g}", run.overcommit),
                                              "--rounds=" + std::to_string(kRounds),
                                              "--selection_seed=9", "--rounds_csv=" + rounds_csv};
  scheduler_flags.insert(scheduler_flags.end(), run.scheduler_flags.begin(),
                         run.scheduler_flags.end());
  LocalCluster cluster({.servers = 2,
                        .workers = kClients,
                        .scheduler_flags = scheduler_flags,
                        .server_flags = run.server_flags});
  const std::string images = cluster.Path("train-images.gz"),
                    labels = cluster.Path("train-labels.gz");
  WriteData(images, labels, 800, 13);
  const std::string run_dir = cluster.Path("run");
  const LocalTraining local{.epochs = 1, .batch = 8, .lr = 0.1};
  run.outputs = RunClients(
      cluster, kClients,
      [&](int) {
        std::vector<std::string> flags =
            EdgeFlags(cluster, images, labels,
                      {"--local_epochs=1", "--batch=8", "--local_lr=0.1", "--partition=iid",
                       "--data_seed=5", "--eval_every=1", "--run_dir=" + run_dir});
        flags.insert(flags.end(), run.client_flags.begin(), run.client_flags.end());
        return flags;
      },
      [&] {
        if (run.during) run.during(cluster, rounds_csv);
      });
  EXPECT_NE(run.outputs.find("final test accuracy"), std::string::npos) << run.outputs;
  run.rounds = ReadRounds(rounds_csv);
  ASSERT_EQ(run.rounds.size(), static_cast<size_t>(kRounds));
  const auto selected = static_cast<size_t>(std::ceil(kPerRound * run.overcommit - 1e-9));
  for (const RoundRow& r : run.rounds) {
    EXPECT_EQ(r.Selected().size(), selected) << "ceil(K x overcommit) clients selected";
    EXPECT_LE(r.kept.size(), static_cast<size_t>(kPerRound));
  }

  // The same rounds, replayed here: every selected client trains from the global model with
  // its own seeded sample order (those not kept too), and the new global model is the
  // sample-weighted mean of the kept clients' models.
  Replay replay(images, labels, cluster.Path("cache-replay"), kSeed, kClients, local);
  replay.Split(PartitionIid(replay.data().size(), kClients, kSeed));
  for (const RoundRow& r : run.rounds) replay.WeightedMean(r.Selected(), r.kept);
  EXPECT_LT(replay.MaxDiffTo(run_dir + "/model.bin"), 1e-5)
      << "the served model is not the weighted mean of the kept uploads";
}

// Federated rounds run by the scheduler: each round samples clients (over-committed), keeps the
// first K uploads, and the servers apply exactly those, sample-weighted; a selected client that
// was not kept trained all the same (its sample order moved on) but its delta is never applied.
TEST(EdgeTest, SampledFedAvgRoundsApplyExactlyTheWeightedMeanOfTheKeptUploads) {
  SampledRun run;
  RunSampledFedAvg(run);
  size_t left_out = 0;
  for (const RoundRow& r : run.rounds) {
    EXPECT_EQ(r.kept.size(), 5u);
    left_out += r.dropped.size();
  }
  EXPECT_GT(left_out, 0u) << "over-commitment left nobody out: the check would be empty";
}

// 30% of the selected clients fail in the middle of their work: they upload part of their delta
// and never report it. Rounds close at their deadline when too few made it, and no part of a
// failed client's upload is ever applied (the replay would differ).
TEST(EdgeTest, FailedClientsPartialUploadsAreNeverApplied) {
  SampledRun run{.scheduler_flags = {"--round_deadline_ms=1500"},
                 .client_flags = {"--fail_fraction=0.3"}};
  RunSampledFedAvg(run);
  EXPECT_NE(run.outputs.find("fails in round"), std::string::npos)
      << "no client failed: the check would be empty";
}

// Secure aggregation (--secure_aggregation): the servers hold only masked words and learn each
// round's sum; the model is still the weighted mean of the kept uploads (within the fixed
// point's step, far below the replay's tolerance), with 30% of the selected clients failing
// after they shared their secrets (their partial, masked uploads never applied, their pairwise
// masks removed with their rebuilt keys).
TEST(EdgeTest, SecureRoundsApplyTheWeightedMeanOfTheKeptUploadsAndNothingElse) {
  SampledRun run{.scheduler_flags = {"--secure_aggregation=secagg+", "--round_deadline_ms=3000"},
                 .client_flags = {"--fail_fraction=0.3"}};
  RunSampledFedAvg(run);
  EXPECT_NE(run.outputs.find("fails in round"), std::string::npos)
      << "no client failed: the check would be empty";
  EXPECT_NE(run.outputs.find("secure aggregation in"), std::string::npos) << run.outputs;
  size_t applied = 0;
  for (const RoundRow& r : run.rounds) applied += r.kept.size();
  EXPECT_GT(applied, 0u) << "no secure round applied anything: the replay would check nothing";
}

// FedBuff's buffer under secure aggregation: cohorts of 5 clients granted together (5 slots,
// so one cohort at a time and each trains from the model the previous one left), each one
// secure round whose unmasked sum is one server step (staleness 0: weight 1). The served model
// is the weighted mean of each cohort's uploads, round after round, with 30% of the members
// failing after they shared their secrets (left out of their cohort, their partial masked
// uploads never applied).
TEST(EdgeTest, SecureFedBuffCohortsApplyTheWeightedMeanOfTheirUploadsAndNothingElse) {
  SampledRun run{.scheduler_flags = {"--secure_aggregation=secagg+", "--concurrency=5"},
                 .client_flags = {"--fail_fraction=0.3"},
                 .overcommit = 1,
                 .server_flags = {"--consistency=committed", "--aggregator=fedbuff:k=5",
                                  "--optimizer=sgd:lr=1", "--init=worker"}};
  RunSampledFedAvg(run);
  EXPECT_NE(run.outputs.find("fails in round"), std::string::npos)
      << "no client failed: the check would be empty";
  size_t applied = 0;
  for (const RoundRow& r : run.rounds) applied += r.kept.size();
  EXPECT_GT(applied, 0u) << "no cohort applied anything: the replay would check nothing";
}

// The scheduler keeps its rounds in its data dir: SIGKILLed while a round is under way and
// restarted, it goes on with the same round (the clients ask again what it had not answered,
// the servers are asked again to close what they may not have answered), the rounds log goes
// on with every aggregation once, and the served model is still exactly the weighted mean of
// the kept uploads, round after round.
TEST(EdgeTest, SampledRoundsGoOnExactlyAcrossASchedulerRestart) {
  ScratchDir dir("edge_sched");
  // Each transfer takes 20 ms each way, so a round lasts long enough to be killed in.
  SampledRun run{.scheduler_flags = {"--data_dir=" + dir.str() + "/scheduler"},
                 .client_flags = {"--link_latency_ms=20"},
                 .rounds_to_run = 10,
                 .during = KillSchedulerAfter(3, 300ms)};
  RunSampledFedAvg(run);
  EXPECT_EQ(run.rounds.size(), 10u);
}

// Asynchronous FedAsync through the scheduler with one slot (concurrency 1: each task pulls the
// model with every earlier commit applied), 30% of the clients failing after uploading half
// their delta: the run finishes with its 24 commits, and the served model is exactly the
// FedAsync mixing of the committed local models in the logged order, so no part of a failed
// upload was ever applied.
void RunAsyncFedAsync(const SampledRun& run) {
  constexpr int kClients = 8, kCommits = 24;
  constexpr uint64_t kSeed = 7;
  constexpr float kAlpha = 0.5f;
  ScratchDir logs("edge_test");
  std::filesystem::create_directories(logs.path());
  const std::string rounds_csv = (logs.path() / "rounds.csv").string();
  LocalCluster cluster(
      {.servers = 2,
       .workers = kClients,
       .scheduler_flags = Concat({"--concurrency=1", "--rounds=" + std::to_string(kCommits),
                                  "--selection_seed=3", "--rounds_csv=" + rounds_csv},
                                 run.scheduler_flags),
       .server_flags = {"--consistency=committed",
                        "--aggregator=fedasync:alpha=0.5,staleness=constant", "--init=worker"}});
  const std::string images = cluster.Path("train-images.gz"),
                    labels = cluster.Path("train-labels.gz");
  WriteData(images, labels, 320, 17);
  const std::string run_dir = cluster.Path("run");
  const LocalTraining local{.epochs = 1, .batch = 8, .lr = 0.1};
  const std::string outputs = RunClients(
      cluster, kClients,
      [&](int i) -> std::vector<std::string> {
        return EdgeFlags(cluster, images, labels,
                         Concat({"--rank=" + std::to_string(i), "--local_epochs=1", "--batch=8",
                                 "--local_lr=0.1", "--partition=iid", "--data_seed=7",
                                 "--fail_fraction=0.3", "--eval_every=100", "--run_dir=" + run_dir},
                                run.client_flags));
      },
      [&] {
        if (run.during) run.during(cluster, rounds_csv);
      });
  EXPECT_NE(outputs.find("fails in round"), std::string::npos)
      << "no client failed: the check would be empty";
  // One row per commit, after the tasks given up since the previous one (with one slot, each
  // was given up before the commit's task was granted).
  const std::vector<RoundRow> rows = ReadRounds(rounds_csv);
  size_t commits = 0, given_up = 0;
  for (const RoundRow& r : rows) {
    ASSERT_EQ(r.kept.size(), 1u);
    commits += r.kept.size();
    given_up += r.dropped.size();
  }
  EXPECT_EQ(commits, static_cast<size_t>(kCommits));
  EXPECT_GT(given_up, 0u);

  Replay replay(images, labels, cluster.Path("cache-replay"), kSeed, kClients, local);
  replay.Split(PartitionIid(replay.data().size(), kClients, kSeed));
  for (const RoundRow& r : rows) {
    for (int dropped : r.dropped) replay.Train(dropped);  // failed or given up: never applied
    auto [w, n] = replay.Train(r.kept[0]);
    Params& global = replay.global;
    for (size_t p = 0; p < w.size(); ++p) {
      for (size_t i = 0; i < w[p].size(); ++i) {
        const float delta = global[p][i] - w[p][i];  // what the client pushed
        const float x_new = global[p][i] - delta;
        global[p][i] = (1 - kAlpha) * global[p][i] + kAlpha * x_new;
      }
    }
  }
  EXPECT_LT(replay.MaxDiffTo(run_dir + "/model.bin"), 1e-5)
      << "the served model is not FedAsync over the committed uploads";
}

TEST(EdgeTest, AsyncFedAsyncWithFailingClientsAppliesExactlyTheCommittedUploads) {
  RunAsyncFedAsync({});
}

// The same across a scheduler SIGKILLed and restarted on its data dir after 8 commits: the
// task it had granted, the uploads it had committed and the tasks it had given up are as they
// were, so the served model is still exactly FedAsync over the committed uploads.
TEST(EdgeTest, AsyncUploadsGoOnExactlyAcrossASchedulerRestart) {
  ScratchDir dir("edge_sched");
  RunAsyncFedAsync({.scheduler_flags = {"--data_dir=" + dir.str() + "/scheduler"},
                    .client_flags = {"--link_latency_ms=20"},
                    .during = KillSchedulerAfter(8, 300ms)});
}

size_t Rows(const std::string& csv_path) {
  std::ifstream in(csv_path);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines > 0 ? lines - 1 : 0;
}

bool WaitRows(const std::string& csv_path, size_t rows) {
  for (int i = 0; i < 300 && Rows(csv_path) < rows; ++i) std::this_thread::sleep_for(100ms);
  return Rows(csv_path) >= rows;
}

// An evaluator blocks on the scheduler until enough rounds closed, and a client until it is
// selected: SIGTERM ends either wait at once, and the rounds go on without the one that left.
TEST(EdgeTest, AProcessWaitingOnRoundsStopsOnSigtermAndTheRoundsGoOn) {
  ScratchDir logs("edge_test");
  std::filesystem::create_directories(logs.path());
  const std::string rounds_csv = (logs.path() / "rounds.csv").string();
  LocalCluster cluster(
      {.servers = 1,
       .workers = 3,
       .scheduler_flags = {"--clients_per_round=1", "--rounds=0", "--rounds_csv=" + rounds_csv},
       .server_flags = {"--consistency=selected", "--aggregator=fedavg", "--optimizer=sgd:lr=1",
                        "--init=worker"}});
  const std::string images = cluster.Path("train-images.gz"),
                    labels = cluster.Path("train-labels.gz");
  WriteData(images, labels, 120, 13);
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < 3; ++i) {
    procs.push_back(cluster.StartWorker(
        EdgeFlags(cluster, images, labels,
                  {"--rank=" + std::to_string(i), "--evaluators=1", "--eval_every=1000000"}),
        cluster.Path("client" + std::to_string(i))));
  }
  ASSERT_TRUE(WaitRows(rounds_csv, 3)) << Slurp(cluster.Path("client1"));
  procs[0]->Signal(SIGTERM);  // the evaluator, waiting for round 1000000
  auto st = procs[0]->WaitExit(5s);
  ASSERT_TRUE(st.has_value()) << "the evaluator did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*st)) << *st;
  const size_t after = Rows(rounds_csv);
  EXPECT_TRUE(WaitRows(rounds_csv, after + 3)) << "the rounds stopped with the evaluator";
  for (int i : {1, 2}) {
    procs[i]->Signal(SIGTERM);
    auto client = procs[i]->WaitExit(5s);
    EXPECT_TRUE(client.has_value()) << "client " << i << " did not stop on SIGTERM";
  }
}

// Processes whose command line mentions `text`.
int ProcessesWith(const std::string& text) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string cmdline = Slurp((entry.path() / "cmdline").string());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(text) != std::string::npos) ++n;
  }
  return n;
}

// One command runs every algorithm over the same scenario, one after another, each applying the
// same budget of uploads (fedavg: 8 uploads = 4 rounds of 2), and writes the report; run again,
// it keeps the finished runs.
TEST(EdgeTest, FedCompareRunsEachAlgorithmOverTheScenarioAndReports) {
  FedBench bench(8);
  const std::string args = "compare --flagfile=" + bench.scenario +
                           " --algorithms=fedavg,fedasync --run_dir=" + bench.run_dir;
  const std::string log = bench.Path("fed.log");
  ASSERT_EQ(WaitCode(bench.Start(args, log), 120s), 0) << Slurp(log);
  const std::string output = Slurp(log);
  EXPECT_NE(output.find("fedavg: aggregation 2/4"), std::string::npos) << output;
  EXPECT_NE(output.find("test accuracy"), std::string::npos);
  const auto summary = nlohmann::json::parse(Slurp(bench.run_dir + "/summary.json"));
  ASSERT_EQ(summary["runs"].size(), 2u);
  EXPECT_EQ(summary["runs"][0]["algorithm"], "fedavg");
  EXPECT_EQ(summary["runs"][0]["aggregations"], 4);
  EXPECT_EQ(summary["runs"][0]["kept"], 8);
  EXPECT_EQ(summary["runs"][1]["algorithm"], "fedasync");
  EXPECT_EQ(summary["runs"][1]["aggregations"], 8);
  for (const auto& run : summary["runs"]) {
    EXPECT_TRUE(run["final_accuracy"].is_number()) << run.dump();
    EXPECT_GT(run["uplink_bytes"].get<int64_t>(), 0) << run.dump();
  }
  const std::string report = Slurp(bench.run_dir + "/report.md");
  EXPECT_NE(report.find("| fedavg | "), std::string::npos) << report;
  EXPECT_NE(report.find("| fedasync | "), std::string::npos) << report;
  EXPECT_NE(Slurp(bench.run_dir + "/plot.gp").find("$run1 << EOD"), std::string::npos);
  const std::string clients = Slurp(bench.run_dir + "/fedavg/clients.csv");
  EXPECT_EQ(std::count(clients.begin(), clients.end(), '\n'), 7) << clients;

  ASSERT_EQ(WaitCode(bench.Start(args, log), 60s), 0) << Slurp(log);
  const std::string again = Slurp(log);
  EXPECT_NE(again.find("fedavg (1/2): done before"), std::string::npos) << again;
  EXPECT_NE(again.find("fedasync (2/2): done before"), std::string::npos) << again;

  // A run that did not finish (no "done") is run again; the finished one is kept.
  std::filesystem::remove(bench.run_dir + "/fedasync/done");
  ASSERT_EQ(WaitCode(bench.Start(args, log), 60s), 0) << Slurp(log);
  const std::string resumed = Slurp(log);
  EXPECT_NE(resumed.find("fedavg (1/2): done before"), std::string::npos) << resumed;
  EXPECT_NE(resumed.find("fedasync (2/2): 6 clients, 8 aggregations"), std::string::npos)
      << resumed;
  EXPECT_EQ(nlohmann::json::parse(Slurp(bench.run_dir + "/summary.json"))["runs"].size(), 2u);

  // A folder that holds something else is never overwritten.
  const std::string other = bench.Path("other");
  std::filesystem::create_directories(other);
  std::ofstream(other + "/notes.txt") << "mine\n";
  EXPECT_EQ(
      WaitCode(bench.Start("run --flagfile=" + bench.scenario + " --run_dir=" + other, log), 30s),
      2)
      << Slurp(log);
  EXPECT_EQ(Slurp(other + "/notes.txt"), "mine\n");
}

// --repeats runs an algorithm again with the next selection seed, each run in its folder, and
// the report gives the mean over the runs.
TEST(EdgeTest, FedRunRepeatsWithTheNextSelectionSeed) {
  FedBench bench(4);
  const std::string log = bench.Path("fed.log");
  ASSERT_EQ(WaitCode(bench.Start("run --flagfile=" + bench.scenario +
                                     " --repeats=2 --run_dir=" + bench.run_dir,
                                 log),
                     120s),
            0)
      << Slurp(log);
  const auto summary = nlohmann::json::parse(Slurp(bench.run_dir + "/summary.json"));
  ASSERT_EQ(summary["algorithms"].size(), 1u);
  EXPECT_EQ(summary["algorithms"][0]["runs"], 2);
  EXPECT_EQ(summary["runs"][1]["repeat"], 1);
  EXPECT_EQ(Slurp(bench.run_dir + "/r1/flags.txt").find("--selection_seed=3"), std::string::npos);
  EXPECT_NE(Slurp(bench.run_dir + "/r2/flags.txt").find("--selection_seed=3"), std::string::npos)
      << "the scenario's seed is 2; the second repeat draws with 3";
  EXPECT_NE(Slurp(bench.run_dir + "/report.md").find("| fedavg | "), std::string::npos);
}

// SIGINT stops the experiment and its whole cluster.
TEST(EdgeTest, FedRunStopsItsClusterOnSigint) {
  FedBench bench(100000);
  const std::string log = bench.Path("fed.log");
  const pid_t pid = bench.Start(
      "run --flagfile=" + bench.scenario + " --algorithm=fedbuff " + "--run_dir=" + bench.run_dir,
      log);
  for (int i = 0; i < 600 && Slurp(log).find("test accuracy") == std::string::npos; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(Slurp(log).find("test accuracy"), std::string::npos) << Slurp(log);
  kill(pid, SIGINT);
  EXPECT_EQ(WaitCode(pid, 30s), 128 + SIGINT) << Slurp(log);
  EXPECT_EQ(ProcessesWith(bench.run_dir), 0) << "a process of the run outlived it";
}

}  // namespace
}  // namespace hetps::testing
