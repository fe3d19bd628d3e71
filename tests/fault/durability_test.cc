// A server with --data_dir on a real cluster: killed in the middle of training (SIGKILL at a
// crash point, so the count is exact), restarted on the same data dir in a new cluster, it
// holds every update it logged, acknowledged ones included, each once. A data dir of another
// model, or one that is not a data dir, stops the server with an error naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// "small" is served by the network thread, "big" (1.2 MB) by an apply thread.
const std::vector<TensorSpec> kTensors = {{"small", {1000}, 0}, {"big", {300000}, 1}};

std::vector<std::string> ServerFlags(const ScratchDir& dir) {
  return {"--data_dir=" + dir.str(), "--init=zeros", "--optimizer=sgd:lr=1",
          "--checkpoint_interval_ms=300"};
}

TEST(DurabilityTest, AKilledServerRestartsWithEveryLoggedUpdateAppliedOnce) {
  ScratchDir dir("hetps-data");
  constexpr int kCrashAt = 41;  // the server dies right after logging its 41st update
  std::atomic<int> acked{0};
  {
    LocalCluster cluster(
        {.servers = 1,
         .workers = 2,
         .scheduler_flags = {"--heartbeat_timeout_ms=1000"},
         .server_flags = ServerFlags(dir),
         .server_exec = "env HETPS_CRASH_AT=update.logged:" + std::to_string(kCrashAt)});
    auto clients = cluster.ConnectClients(2);
    LocalCluster::RunEach(2, [&](int i) {
      ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
      std::vector<float> ones(300000, 1.0f);
      // Each worker pushes ones to both tensors, one push at a time, until the server is gone.
      for (int step = 0; step < 1000; ++step) {
        const TensorSpec& t = kTensors[step % 2];
        Status s = clients[i]->Push(t.name, ones.data(), t.NumElements()).Wait();
        if (!s.ok()) break;
        ++acked;
      }
    });
    auto died = cluster.server(0).WaitExit(10s);
    ASSERT_TRUE(died.has_value());
    ASSERT_TRUE(WIFSIGNALED(*died) && WTERMSIG(*died) == SIGKILL) << "status " << *died;
  }
  // Every acknowledged update was logged before its reply; the 41st was logged and never
  // answered: all of them, no more, are in the restarted server.
  EXPECT_LT(acked.load(), kCrashAt);
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors(kTensors).ok());
  double applied = 0;
  for (const TensorSpec& t : kTensors) {
    std::vector<float> w(t.NumElements());
    ASSERT_TRUE(clients[0]->Pull(t.name, w.data(), t.NumElements()).Wait().ok());
    for (float v : w) ASSERT_EQ(v, w[0]) << t.name << " holds different sums in one tensor";
    applied += -w[0];  // sgd:lr=1 on ones from zeros: minus the number of pushes applied
  }
  EXPECT_EQ(applied, kCrashAt);
  // The restarted server goes on: a further push applies on top.
  std::vector<float> ones(1000, 1.0f);
  ASSERT_TRUE(clients[0]->Push("small", ones.data(), 1000).Wait().ok());
  EXPECT_TRUE(clients[0]->Finish().ok());
}

// The same for a sparse table (docs/tables.md): its pushes are logged before their replies and
// its buckets checkpointed with their rows; a restarted server holds every logged row push once.
TEST(DurabilityTest, AKilledServerRestartsWithEveryLoggedTablePushAppliedOnce) {
  ScratchDir dir("hetps-data");
  constexpr int kCrashAt = 41;
  const std::vector<TensorSpec> tables = {{"emb", {4}, 0, {.dim = 4, .init = "zeros"}}};
  std::vector<uint64_t> keys(300);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = k * 0x9e3779b97f4a7c15ULL;
  const std::vector<float> ones(keys.size() * 4, 1.0f);
  std::atomic<int> acked{0}, declared{0};
  {
    LocalCluster cluster(
        {.servers = 1,
         .workers = 2,
         .scheduler_flags = {"--heartbeat_timeout_ms=1000"},
         .server_flags = ServerFlags(dir),
         .server_exec = "env HETPS_CRASH_AT=update.logged:" + std::to_string(kCrashAt)});
    auto clients = cluster.ConnectClients(2);
    LocalCluster::RunEach(2, [&](int i) {
      ASSERT_TRUE(clients[i]->DeclareTensors(tables).ok());
      // Both declared before either pushes: the crash must not come while one still declares.
      ++declared;
      while (declared.load() < 2) std::this_thread::sleep_for(1ms);
      // Each call pushes every key: one request per bucket (each bucket is a partition).
      for (int step = 0; step < 1000; ++step) {
        Status s =
            clients[i]
                ->PushRows("emb", keys.data(), static_cast<int64_t>(keys.size()), ones.data())
                .Wait();
        if (!s.ok()) break;
        ++acked;
      }
    });
    auto died = cluster.server(0).WaitExit(10s);
    ASSERT_TRUE(died.has_value());
    ASSERT_TRUE(WIFSIGNALED(*died) && WTERMSIG(*died) == SIGKILL) << "status " << *died;
  }
  // A call pushes each of the table's 4 buckets once: the 41st logged bucket push was the last.
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors(tables).ok());
  std::vector<float> rows(keys.size() * 4);
  ASSERT_TRUE(clients[0]
                  ->PullRows("emb", keys.data(), static_cast<int64_t>(keys.size()), rows.data())
                  .Wait()
                  .ok());
  const ShardMap& map = clients[0]->shard_map();
  std::map<int32_t, float> per_bucket;  // every key of a bucket holds minus its pushes applied
  double applied = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const int32_t bucket = map.TablePartition(0, keys[k]);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(rows[k * 4 + j], rows[k * 4]) << "key " << k;
    auto [it, fresh] = per_bucket.try_emplace(bucket, rows[k * 4]);
    EXPECT_EQ(it->second, rows[k * 4]) << "bucket " << bucket << " holds different sums";
    if (fresh) applied += -rows[k * 4];
  }
  EXPECT_EQ(per_bucket.size(), 4u);
  EXPECT_EQ(applied, kCrashAt);
  EXPECT_LE(acked.load() * 4, kCrashAt);  // what was acknowledged is among them
  EXPECT_GE(acked.load() * 4, kCrashAt - 8);
  ASSERT_TRUE(clients[0]->PushRows("emb", keys.data(), 1, ones.data()).Wait().ok());
  EXPECT_TRUE(clients[0]->Finish().ok());
}

// The full story on a running cluster: a server SIGKILLed in the middle of pushes is restarted
// on its data dir, takes its rank over, and the workers (waiting, not failing) resend what it
// never answered; at the end every tensor holds exactly the sum of every push, each once, and
// no worker was restarted.
// Through each co-located transport: pushes a killed server was lent (cma) or had in its
// slots (shm) go again, on the socket, to the restarted one.
class RestartTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Transports, RestartTest, ::testing::Values("shm", "cma"));

TEST_P(RestartTest, ARestartedServerRejoinsTheRunningClusterAndNothingIsLostOrDoubled) {
  ScratchDir dir("hetps-data");
  std::vector<std::string> flags = ServerFlags(dir);
  flags[0] = "--data_dir=" + dir.str() + "/server{i}";
  LocalCluster cluster({.servers = 2,
                        .workers = 2,
                        .scheduler_flags = {"--heartbeat_timeout_ms=1000"},
                        .server_flags = flags});
  std::vector<std::unique_ptr<Client>> clients(2);
  LocalCluster::RunEach(2, [&](int i) {
    ClientOptions o = cluster.ClientOpts();
    o.server_recovery_timeout_ms = 20000;
    o.transport = GetParam();
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    clients[i] = std::move(*c);
    ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
  });
  constexpr int kPushes = 60;  // per worker and tensor
  std::atomic<int> done{0};
  std::atomic<bool> failed{false};
  std::thread pushers([&] {
    LocalCluster::RunEach(2, [&](int i) {
      std::vector<float> ones(300000, 1.0f);
      for (int step = 0; step < 2 * kPushes; ++step) {
        const TensorSpec& t = kTensors[step % 2];
        Status s = clients[i]->Push(t.name, ones.data(), t.NumElements()).Wait();
        if (!s.ok()) {
          ADD_FAILURE() << "worker " << i << " push " << step << ": " << s.ToString();
          failed = true;
          return;
        }
        ++done;
        std::this_thread::sleep_for(5ms);
      }
    });
  });
  while (done.load() < 40 && !failed.load()) std::this_thread::sleep_for(5ms);
  cluster.server(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.server(0).WaitExit(5s).has_value());
  cluster.RestartServer(0);  // it asks for its rank until the old one is declared dead
  pushers.join();
  ASSERT_FALSE(failed.load());
  for (const TensorSpec& t : kTensors) {
    std::vector<float> w(t.NumElements());
    ASSERT_TRUE(clients[0]->Pull(t.name, w.data(), t.NumElements()).Wait().ok());
    EXPECT_EQ(w.front(), -2.0f * kPushes) << t.name;
    EXPECT_EQ(w.back(), -2.0f * kPushes) << t.name;
  }
  EXPECT_GT(clients[0]->stats().shared_memory_bytes, 0) << "nothing went through " << GetParam();
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// An operator switched the consistency before the restart: the restarted server runs the
// cluster's consistency, not the one its command line still names.
TEST(DurabilityTest, ARestartedServerTakesTheClustersCurrentConsistency) {
  ScratchDir dir("hetps-data");
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--heartbeat_timeout_ms=1000"},
                        .server_flags = ServerFlags(dir)});
  ClientOptions o = cluster.ClientOpts();
  o.server_recovery_timeout_ms = 20000;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->DeclareTensors(kTensors).ok());
  ASSERT_EQ(cluster.Ctl("set consistency=ssp:staleness=3"), 0);
  cluster.server(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.server(0).WaitExit(5s).has_value());
  cluster.RestartServer(0);
  std::vector<float> ones(1000, 1.0f);
  ASSERT_TRUE((*client)->Push("small", ones.data(), 1000).Wait().ok());  // waits for it
  // The server reports its consistency with its heartbeats; read it from the status.
  const std::string command =
      Bin("hetps") + " status --json --scheduler=" + cluster.endpoint() + " 2>/dev/null";
  std::string json;
  for (int attempt = 0; attempt < 50; ++attempt) {
    json = Shell(command).output;
    // Two server entries (the dead process and the restarted one) both say ssp once the new
    // one has reported; asp would mean the restarted server kept its command line's policy.
    if (json.find("\"consistency\":\"asp") == std::string::npos &&
        json.find("\"consistency\":\"ssp:staleness=3\"") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(json.find("\"consistency\":\"asp"), std::string::npos) << json;
  EXPECT_NE(json.find("\"consistency\":\"ssp:staleness=3\""), std::string::npos) << json;
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST(DurabilityTest, ACleanStopCheckpointsAndARestartResumesTheModel) {
  ScratchDir dir("hetps-data");
  std::vector<float> before(1000);
  {
    LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
    auto clients = cluster.ConnectClients(1);
    ASSERT_TRUE(clients[0]->DeclareTensors(kTensors).ok());
    std::vector<float> g(1000);
    for (int i = 0; i < 1000; ++i) g[i] = 0.001f * i;
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(clients[0]->Push("small", g.data(), 1000).Wait().ok());
    ASSERT_TRUE(clients[0]->Pull("small", before.data(), 1000).Wait().ok());
    ASSERT_TRUE(clients[0]->Finish().ok());  // the scheduler then stops the server
    auto st = cluster.server(0).WaitExit(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(WEXITSTATUS(*st), 0);
  }
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors(kTensors).ok());
  std::vector<float> after(1000);
  ASSERT_TRUE(clients[0]->Pull("small", after.data(), 1000).Wait().ok());
  EXPECT_EQ(after, before);
  EXPECT_TRUE(clients[0]->Finish().ok());
}

TEST(DurabilityTest, ADataDirOfAnotherModelStopsTheServer) {
  ScratchDir dir("hetps-data");
  {
    LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
    auto clients = cluster.ConnectClients(1);
    ASSERT_TRUE(clients[0]->DeclareTensors(kTensors).ok());
    ASSERT_TRUE(clients[0]->Finish().ok());
    ASSERT_TRUE(cluster.server(0).WaitExit(10s).has_value());
  }
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = ServerFlags(dir)});
  auto clients = cluster.ConnectClients(1);
  EXPECT_FALSE(clients[0]->DeclareTensors({{"other", {500}, 0}}).ok());
  auto st = cluster.server(0).WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the server went on with a data dir of another model";
  EXPECT_EQ(WEXITSTATUS(*st), 1);
}

TEST(DurabilityTest, AFolderThatIsNotADataDirIsRefusedAtStart) {
  ScratchDir dir("hetps-data");
  fs::create_directories(dir.str());
  std::ofstream(dir.str() + "/model.bin") << "someone else's file";
  const std::string out = dir.str() + ".log";
  Supervisor supervisor({});
  auto server = supervisor.Start("server", "server",
                                 {Bin("hetps-server"), "--data_dir=" + dir.str(),
                                  "--scheduler=tcp://127.0.0.1:9", "--join_timeout_ms=20000"},
                                 out);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto st = supervisor.WaitExit(**server, 10s);
  ASSERT_TRUE(st.has_value()) << "the server did not refuse the folder";
  EXPECT_EQ(WEXITSTATUS(*st), 1);
  std::stringstream printed;
  printed << std::ifstream(out).rdbuf();
  EXPECT_NE(printed.str().find(dir.str()), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("empty model"), std::string::npos) << printed.str();
  fs::remove(out);
}

}  // namespace
}  // namespace hetps::testing
