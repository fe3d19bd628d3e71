// Replicated server ranks (--replicas=1, docs/replication.md) with exact sums. Workers push ones
// (SGD, lr 1, from zeros: every element of a tensor ends at minus the pushes applied to it) and
// clock, under asp and under bsp, while primaries die and nothing restarts them: each rank's
// standby takes over. At the end every tensor holds exactly the sum of all acknowledged pushes,
// each counted once. A primary frozen (SIGSTOP) past its promotion and then resumed is fenced:
// it stops, and the sums stay exact.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <optional>
#include <set>
#include <thread>

#include "tests/fault/exact_sums.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

const std::vector<TensorSpec>& kTensors = kOnesTensors;
constexpr int kWorkers = 2;
constexpr int kSteps = 40;                     // clocks per worker
constexpr int kTotal = kWorkers * kSteps * 2;  // acknowledged pushes of a whole run

ClusterOptions Options(const std::string& consistency) {
  return {.servers = 2,
          .workers = kWorkers,
          .scheduler_flags = {"--heartbeat_timeout_ms=800", "--replicas=1"},
          .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--heartbeat_interval_ms=100",
                           "--consistency=" + consistency},
          .standbys = 2};
}

// Workers that push ones to each tensor and clock kSteps times, counting acknowledged pushes.
class Pushers {
 public:
  explicit Pushers(LocalCluster& cluster) {
    clients_ = cluster.ConnectClients(
        kWorkers, [](ClientOptions& o) { o.server_recovery_timeout_ms = 30000; });
    LocalCluster::RunEach(kWorkers,
                          [&](int i) { ASSERT_TRUE(clients_[i]->DeclareTensors(kTensors).ok()); });
    thread_ = std::thread([this] { LocalCluster::RunEach(kWorkers, [this](int i) { Run(i); }); });
  }
  ~Pushers() {
    if (thread_.joinable()) thread_.join();
  }
  int acked() const { return acked_.load(); }
  bool failed() const { return failed_.load(); }
  void WaitFor(int acked) const {
    while (acked_.load() < acked && !failed_.load()) std::this_thread::sleep_for(2ms);
  }
  // Joins the workers, then checks the sums from every worker's view.
  void Finish() {
    thread_.join();
    ASSERT_FALSE(failed());
    ASSERT_EQ(acked(), kTotal);
    LocalCluster::RunEach(kWorkers, [&](int i) { EXPECT_TRUE(clients_[i]->Barrier().ok()); });
    ExpectOnesSums(*clients_[0], kWorkers * kSteps);
    LocalCluster::RunEach(kWorkers, [&](int i) { EXPECT_TRUE(clients_[i]->Finish().ok()); });
  }

 private:
  void Run(int i) { PushOnes(*clients_[i], i, kSteps, acked_, failed_); }

  std::vector<std::unique_ptr<Client>> clients_;
  std::atomic<int> acked_{0};
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

class ReplicationTest : public ::testing::TestWithParam<std::string> {};

// Both primaries are SIGKILLed, one after the other, and never restarted.
TEST_P(ReplicationTest, KilledPrimariesFailOverToTheirBackupsLosingAndDoublingNothing) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  for (int victim : {0, 1}) {
    pushers.WaitFor(kTotal * (victim + 1) / 3);
    std::printf("SIGKILL of the primary of rank %d after %d acknowledged pushes\n", victim,
                pushers.acked());
    cluster.server(victim).Signal(SIGKILL);
    ASSERT_TRUE(cluster.server(victim).WaitExit(5s).has_value());
  }
  pushers.Finish();
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the scheduler did not end the run";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

// A new standby joins while training goes on (the promoted primary sends it every partition's
// state, then every record) and takes over at the next failure: the primary of a rank is
// killed twice, with the first promotion's replacement backup in place for the second.
TEST_P(ReplicationTest, AReplacementBackupSyncsWhileTrainingAndTakesTheNextFailureOver) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  pushers.WaitFor(kTotal / 4);
  std::printf("SIGKILL of server 0 after %d acknowledged pushes\n", pushers.acked());
  cluster.server(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.server(0).WaitExit(5s).has_value());
  const int replacement = cluster.StartStandby();
  ASSERT_GE(replacement, 0);
  pushers.WaitFor(kTotal / 2);
  // The rank's primary now is whichever standby took it over; the other backs up rank 1 and
  // the replacement rank 0 (the rank with no backup left). Kill both standbys that started
  // with the cluster, one of them the new primary of rank 0: rank 0 fails over to the
  // replacement, which must hold everything by now.
  std::this_thread::sleep_for(1500ms);  // the replacement reported holding every partition
  for (int i : {2, 3}) cluster.server(i).Signal(SIGKILL);
  for (int i : {2, 3}) ASSERT_TRUE(cluster.server(i).WaitExit(5s).has_value());
  std::printf("SIGKILL of the first standbys after %d acknowledged pushes\n", pushers.acked());
  pushers.Finish();
}

// A primary SIGKILLed and restarted on its data dir (as an orchestrator's restart policy does)
// finds its rank failed over: it joins as the rank's backup instead, syncs while training goes
// on, and takes the rank back at the next failure (both first standbys killed).
TEST_P(ReplicationTest, AKilledPrimaryRestartedOnItsDataDirBacksItsRankUpAgain) {
  ScratchDir root("hetps-replicas");
  ClusterOptions options = Options(GetParam());
  options.server_flags.push_back("--data_dir=" + root.str() + "/server{i}");
  LocalCluster cluster(options);
  Pushers pushers(cluster);
  pushers.WaitFor(kTotal / 4);
  cluster.server(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.server(0).WaitExit(5s).has_value());
  pushers.WaitFor(pushers.acked() + 8);  // its standby serves the rank
  cluster.RestartServer(0);
  pushers.WaitFor(kTotal / 2);
  std::this_thread::sleep_for(1500ms);  // the restarted server holds the rank again
  for (int i : {2, 3}) cluster.server(i).Signal(SIGKILL);
  for (int i : {2, 3}) ASSERT_TRUE(cluster.server(i).WaitExit(5s).has_value());
  std::printf("SIGKILL of the first standbys after %d acknowledged pushes\n", pushers.acked());
  pushers.Finish();
}

// The scheduler (on its data dir) is SIGKILLed and restarted: the backups tell the new one whom
// they follow and that they hold their ranks, so a primary killed afterwards still fails over.
TEST_P(ReplicationTest, BackupsStillTakeOverAfterTheSchedulerWasRestarted) {
  ScratchDir root("hetps-replicas");
  ClusterOptions options = Options(GetParam());
  options.scheduler_flags.push_back("--data_dir=" + root.str() + "/scheduler");
  LocalCluster cluster(options);
  Pushers pushers(cluster);
  pushers.WaitFor(kTotal / 4);
  cluster.scheduler().Signal(SIGKILL);
  ASSERT_TRUE(cluster.scheduler().WaitExit(5s).has_value());
  cluster.RestartScheduler();
  pushers.WaitFor(kTotal / 2);
  std::printf("SIGKILL of server 0 after %d acknowledged pushes\n", pushers.acked());
  cluster.server(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.server(0).WaitExit(5s).has_value());
  pushers.Finish();
}

// Rank 0's primary is frozen until its backup serves the rank, then resumed: it is fenced
// (its backup, now the primary, refuses its records; the scheduler no longer counts it) and
// stops, and nothing it took while frozen is counted.
TEST_P(ReplicationTest, AFrozenPrimaryResumedAfterItsBackupWasPromotedIsFencedOut) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  pushers.WaitFor(kTotal / 3);
  cluster.server(0).Signal(SIGSTOP);
  const int at_stop = pushers.acked();
  // Pushes go on once the backup was promoted (failure detection: 800 ms).
  pushers.WaitFor(at_stop + 8);
  ASSERT_FALSE(pushers.failed());
  cluster.server(0).Signal(SIGCONT);
  auto st = cluster.server(0).WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the resumed old primary kept running";
  EXPECT_NE(WEXITSTATUS(*st), 0);
  pushers.Finish();
}

// An operator hands each rank to its backup in turn (hetps ctl drain-server) while the workers
// push: the primary takes no more requests, exits cleanly once its backup holds every update
// it took, and the backup serves the rank; the workers resend what waited. Exact sums.
TEST_P(ReplicationTest, DrainedPrimariesHandTheirRanksToTheirBackups) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  std::set<int> gone;  // servers (cluster.server(i)) that exited
  for (int rank : {0, 1}) {
    pushers.WaitFor(kTotal * (rank + 1) / 3);
    // Refused until the rank's standby holds all of it (it syncs as the run starts).
    const std::string drain = "drain-server --rank=" + std::to_string(rank);
    int rc = cluster.Ctl(drain);
    for (int tries = 0; rc != 0 && tries < 50; ++tries) {
      std::this_thread::sleep_for(100ms);
      rc = cluster.Ctl(drain);
    }
    ASSERT_EQ(rc, 0) << "rank " << rank << " was not handed over";
    std::printf("rank %d handed over after %d acknowledged pushes\n", rank, pushers.acked());
    // Which process served the rank depends on the order they registered in: the one that
    // exits now. It exits cleanly.
    std::optional<int> st;
    for (int tries = 0; !st && tries < 100; ++tries) {
      for (int i = 0; i < 4 && !st; ++i) {
        if (!gone.contains(i) && (st = cluster.server(i).WaitExit(25ms))) gone.insert(i);
      }
    }
    ASSERT_TRUE(st.has_value()) << "the drained primary kept running";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
    // Drained again: the rank's primary is the former standby, which has no backup now.
    EXPECT_NE(cluster.Ctl(drain), 0);
  }
  pushers.Finish();
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the scheduler did not end the run";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

// A primary asked to stop (SIGTERM: a Compose scale-down, a Kubernetes pod deleted) hands its
// rank to its backup first and exits cleanly; the workers never wait for a failure detection.
TEST_P(ReplicationTest, AStoppedPrimaryHandsItsRankOverBeforeItExits) {
  ClusterOptions options = Options(GetParam());
  options.scheduler_flags[0] = "--heartbeat_timeout_ms=60000";  // a failover would show
  LocalCluster cluster(options);
  Pushers pushers(cluster);
  pushers.WaitFor(kTotal / 3);
  std::this_thread::sleep_for(300ms);  // the standbys hold their ranks
  const int before = pushers.acked();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i) cluster.server(i).Signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    auto st = cluster.server(i).WaitExit(10s);
    ASSERT_TRUE(st.has_value()) << "server " << i << " did not stop";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  }
  // Nothing waits for the 60 s heartbeat timeout: the ranks were handed over.
  pushers.WaitFor(before + 8);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  pushers.Finish();
}

// The backups are lost while a rank drains (frozen, then killed): either the primary's last
// records stay unacknowledged until the backup is declared dead, and no synced backup is left
// to promote, or the frozen backup was already told to take the rank over and dies instead.
// Either way the drained primary is the rank's primary again and serves (RESUME), starting with
// the requests that waited; the drain fails with the reason and the sums stay exact.
TEST_P(ReplicationTest, APrimaryWhoseBackupIsLostWhileDrainingServesAgain) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  pushers.WaitFor(kWorkers * kSteps / 2);
  std::this_thread::sleep_for(300ms);  // the standbys hold their ranks
  for (int i : {2, 3}) cluster.server(i).Signal(SIGSTOP);
  int drain_rc = 0;
  std::thread drain([&] { drain_rc = cluster.Ctl("drain-server --rank=0"); });
  std::this_thread::sleep_for(300ms);
  for (int i : {2, 3}) {
    cluster.server(i).Signal(SIGKILL);
    ASSERT_TRUE(cluster.server(i).WaitExit(5s).has_value());
  }
  drain.join();
  EXPECT_NE(drain_rc, 0) << "the drain cannot succeed without a backup";
  pushers.Finish();
  for (int i : {0, 1}) {  // both primaries served to the end
    auto st = cluster.server(i).WaitExit(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  }
}

// The other end of a move crashes: the primaries are frozen (so rank 0's cannot answer DRAINED)
// while rank 0 is drained, then killed. Each rank fails over to its synced backup as after any
// failure, the drain ends (handed over or failed with its reason, never hanging), and the sums
// stay exact: nothing a primary acknowledged is lost, nothing resent is applied twice.
TEST_P(ReplicationTest, APrimaryKilledWhileDrainingFailsOverToItsBackupExactly) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  pushers.WaitFor(kWorkers * kSteps / 2);
  std::this_thread::sleep_for(300ms);  // the standbys hold their ranks
  for (int i : {0, 1}) cluster.server(i).Signal(SIGSTOP);
  int drain_rc = -1;
  std::thread drain([&] { drain_rc = cluster.Ctl("drain-server --rank=0"); });
  std::this_thread::sleep_for(300ms);
  for (int i : {0, 1}) {
    cluster.server(i).Signal(SIGKILL);
    ASSERT_TRUE(cluster.server(i).WaitExit(5s).has_value());
  }
  drain.join();
  std::printf("the drain ended with %d\n", drain_rc);
  EXPECT_GE(drain_rc, 0);
  pushers.Finish();
  for (int i : {2, 3}) {  // the promoted backups served to the end
    auto st = cluster.server(i).WaitExit(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  }
}

// A drain the cluster cannot do is refused with its reason and changes nothing: no standby
// holds the rank, no such rank, a malformed command; the run goes on and ends exact.
TEST_P(ReplicationTest, ADrainWithoutABackupIsRefusedAndTheRankKeepsServing) {
  ClusterOptions options = Options(GetParam());
  options.standbys = 0;
  LocalCluster cluster(options);
  Pushers pushers(cluster);
  pushers.WaitFor(kWorkers * kSteps / 2);
  EXPECT_NE(cluster.Ctl("drain-server --rank=0"), 0);
  EXPECT_NE(cluster.Ctl("drain-server --rank=7"), 0);
  EXPECT_NE(cluster.Ctl("drain-server"), 0);
  EXPECT_NE(cluster.Ctl("drain-server --rank=x"), 0);
  pushers.Finish();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(cluster.server(i).WaitExit(10s).has_value());
}

INSTANTIATE_TEST_SUITE_P(Consistency, ReplicationTest, ::testing::Values("asp", "bsp"));

}  // namespace
}  // namespace hetps::testing
