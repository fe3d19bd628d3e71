#include "scheduler/fed_rounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/scratch_dir.h"

namespace hetps {
using testing::ScratchDir;
namespace {

// Records what FedRounds sends; two servers answer ROUND_CLOSE when the test says so.
struct Recorder {
  std::map<int32_t, proto::FedRound> tasks;    // by worker: the latest ROUND_TASK
  std::map<int32_t, proto::FedRound> answers;  // by worker: the latest ROUND_UPLOADED answer
  std::map<int32_t, proto::FedRound> watches;  // by evaluator: the latest ROUND_WATCH answer
  std::vector<proto::FedRound> closes;
  std::vector<int32_t> servers = {100, 101};

  FedRounds::Actions Actions() {
    return {.answer_checkin = [this](const Arrival& a,
                                     const proto::FedRound& r) { tasks[a.worker] = r; },
            .answer_upload = [this](const Arrival& a,
                                    const proto::FedRound& r) { answers[a.worker] = r; },
            .answer_watch = [this](const Arrival& a,
                                   const proto::FedRound& r) { watches[a.worker] = r; },
            .close = [this](const proto::FedRound& r) { closes.push_back(r); },
            .live_servers = [this] { return servers; },
            .rank_of = [](int32_t id) { return id - 1; }};
  }
};

Arrival From(int32_t worker) { return {worker, 7, "id"}; }

std::vector<int32_t> Selected(const Recorder& r, int64_t round) {
  std::vector<int32_t> ids;
  for (const auto& [w, t] : r.tasks) {
    if (!t.finished() && t.round() == round) ids.push_back(w);
  }
  return ids;
}

void CloseOnServers(FedRounds& f, const Recorder& r, int live, double now) {
  for (int32_t s : r.servers) f.OnClosed(s, r.closes.back().round(), live, now);
}

TEST(FedRoundsTest, ARoundOpensWithTheClientsItSelectsAndKeepsTheFirstK) {
  Recorder rec;
  FedRounds f({.clients_per_round = 2, .overcommit = 1.5, .rounds = 3}, rec.Actions());
  for (int32_t w = 1; w <= 2; ++w) f.CheckIn(From(w), 5, 0.0);
  EXPECT_TRUE(rec.tasks.empty()) << "opened with 2 idle; the round selects ceil(2 * 1.5) = 3";
  for (int32_t w = 3; w <= 5; ++w) f.CheckIn(From(w), 5, 0.1);
  const std::vector<int32_t> picked = Selected(rec, 0);
  ASSERT_EQ(picked.size(), 3u);
  // The first two uploads are kept and close the round; the third is late.
  f.Uploaded(From(picked[1]), 0, 5, 1.0);
  EXPECT_TRUE(rec.closes.empty());
  f.Uploaded(From(picked[0]), 0, 5, 2.0);
  ASSERT_EQ(rec.closes.size(), 1u);
  EXPECT_EQ(rec.closes[0].round(), 0);
  EXPECT_EQ(std::vector<int32_t>(rec.closes[0].workers().begin(), rec.closes[0].workers().end()),
            (std::vector<int32_t>{picked[1], picked[0]}));
  f.Uploaded(From(picked[2]), 0, 5, 3.0);
  EXPECT_TRUE(rec.answers[picked[0]].kept());
  EXPECT_TRUE(rec.answers[picked[1]].kept());
  EXPECT_FALSE(rec.answers[picked[2]].kept()) << "an upload after the K-th is not kept";
  EXPECT_EQ(f.clients().at(picked[2]).missed, 1);
  EXPECT_EQ(f.clients().at(picked[0]).kept, 1);
  // Later rounds do not wait for every client: 3 idle are enough while picked[2] is away.
  CloseOnServers(f, rec, 5, 3.5);
  f.CheckIn(From(picked[0]), 5, 4);
  EXPECT_EQ(Selected(rec, 1).size(), 3u);
}

TEST(FedRoundsTest, TheNextRoundOpensOnlyOnceEveryServerAppliedTheLast) {
  Recorder rec;
  FedRounds f({.clients_per_round = 1, .rounds = 2}, rec.Actions());
  f.CheckIn(From(1), 2, 0);
  f.CheckIn(From(2), 2, 0);
  ASSERT_EQ(Selected(rec, 0).size(), 1u);
  const int32_t first = Selected(rec, 0)[0], other = first == 1 ? 2 : 1;
  f.Uploaded(From(first), 0, 2, 1);
  f.CheckIn(From(first), 2, 1);
  ASSERT_EQ(rec.closes.size(), 1u);
  f.OnClosed(100, 0, 2, 1.5);
  EXPECT_TRUE(Selected(rec, 1).empty()) << "server 101 has not applied round 0 yet";
  f.OnClosed(101, 0, 2, 2);
  EXPECT_EQ(Selected(rec, 1).size(), 1u);
  EXPECT_EQ(f.round(), 1);
  // Round 1 closes; the run has 2 rounds, so every idle client is told it is finished.
  const int32_t second = Selected(rec, 1)[0];
  f.Uploaded(From(second), 1, 2, 3);
  CloseOnServers(f, rec, 2, 3);
  EXPECT_TRUE(f.finished());
  const int32_t idle = second == first ? other : first;
  EXPECT_TRUE(rec.tasks[idle].finished());
  f.CheckIn(From(second), 2, 4);
  EXPECT_TRUE(rec.tasks[second].finished()) << "a check-in after the last round";
}

TEST(FedRoundsTest, ADeadlineClosesTheRoundWithWhatArrived) {
  Recorder rec;
  FedRounds f({.clients_per_round = 3, .deadline_s = 10, .rounds = 5}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  f.Uploaded(From(2), 0, 3, 4);
  f.Tick(3, 9.9);
  EXPECT_TRUE(rec.closes.empty());
  f.Tick(3, 10.0);
  ASSERT_EQ(rec.closes.size(), 1u);
  ASSERT_EQ(rec.closes[0].workers_size(), 1);
  EXPECT_EQ(rec.closes[0].workers(0), 2);
  f.Uploaded(From(1), 0, 3, 11);
  EXPECT_FALSE(rec.answers[1].kept()) << "after the deadline";
  EXPECT_EQ(f.clients().at(1).missed, 1);
  EXPECT_EQ(f.clients().at(3).missed, 1);
}

// Clients that start offline (an availability trace) do not check in: the first round waits
// for every live client, but no longer than the deadline after the first check-in.
// FedLesScan's tolerance (--late_rounds=1): an upload reported after its round closed joins
// the next close, weighted by (its round + 1) / (that round + 1); one later than that is not.
TEST(FedRoundsTest, LateUploadsWithinTheToleranceJoinTheNextClose) {
  Recorder rec;
  FedRounds f({.clients_per_round = 1, .overcommit = 3, .rounds = 4, .late_rounds = 1},
              rec.Actions());
  for (int32_t w = 1; w <= 4; ++w) f.CheckIn(From(w), 4, 0);
  const std::vector<int32_t> round0 = Selected(rec, 0);
  ASSERT_EQ(round0.size(), 3u);
  f.Uploaded(From(round0[0]), 0, 4, 1);  // the K-th: round 0 closes with it
  ASSERT_EQ(rec.closes.size(), 1u);
  EXPECT_EQ(rec.closes[0].late_rounds(), 1);
  EXPECT_EQ(rec.closes[0].late_size(), 0);
  f.Uploaded(From(round0[1]), 0, 4, 2);  // after the close: late by one round
  EXPECT_TRUE(rec.answers[round0[1]].kept()) << "accepted for the next close";
  EXPECT_EQ(f.clients().at(round0[1]).missed, 1) << "it still missed its round";
  CloseOnServers(f, rec, 4, 2.5);
  f.CheckIn(From(round0[0]), 4, 3);
  f.CheckIn(From(round0[1]), 4, 3);
  const std::vector<int32_t> round1 = Selected(rec, 1);
  ASSERT_EQ(round1.size(), 3u);
  f.Uploaded(From(round1[0]), 1, 4, 4);
  ASSERT_EQ(rec.closes.size(), 2u);
  const proto::FedRound& close = rec.closes[1];
  EXPECT_EQ(close.round(), 1);
  ASSERT_EQ(close.workers_size(), 1);
  EXPECT_EQ(close.workers(0), round1[0]);
  ASSERT_EQ(close.late_size(), 1);
  EXPECT_EQ(close.late(0).worker(), round0[1]);
  EXPECT_EQ(close.late(0).round(), 0);
  EXPECT_DOUBLE_EQ(close.late(0).factor(), 0.5);  // (0 + 1) / (1 + 1)
  CloseOnServers(f, rec, 4, 4.5);
  // round0[2] reports its round-0 upload only now: the next close is round 2, two rounds late.
  f.Uploaded(From(round0[2]), 0, 4, 5);
  EXPECT_FALSE(rec.answers[round0[2]].kept());
  EXPECT_EQ(f.clients().at(round0[1]).kept, 1);
  EXPECT_FALSE(ValidateFedRoundsOptions({.concurrency = 2, .late_rounds = 1}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.late_rounds = -1}).ok());
}

TEST(FedRoundsTest, TheFirstRoundWaitsForEveryClientAtMostTheDeadline) {
  Recorder rec;
  FedRounds f({.clients_per_round = 2, .deadline_s = 10, .rounds = 5}, rec.Actions());
  f.CheckIn(From(1), 4, 1);
  f.CheckIn(From(2), 4, 2);
  f.Tick(4, 10.9);
  EXPECT_TRUE(rec.tasks.empty()) << "two of four clients checked in";
  f.Tick(4, 11);
  EXPECT_EQ(Selected(rec, 0).size(), 2u) << "the deadline after the first check-in passed";
  Recorder async;
  FedRounds g({.deadline_s = 10, .concurrency = 2}, async.Actions());
  g.CheckIn(From(1), 3, 0);
  g.Tick(3, 9);
  EXPECT_TRUE(async.tasks.empty());
  g.Tick(3, 10);
  EXPECT_EQ(async.tasks.size(), 1u);
}

TEST(FedRoundsTest, AClientThatDiesIsNeverKeptAndTheRoundGoesOnWithoutIt) {
  Recorder rec;
  FedRounds f({.rounds = 3}, rec.Actions());  // K = 0: every selected client
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  ASSERT_EQ(Selected(rec, 0).size(), 3u);
  f.Uploaded(From(1), 0, 3, 1);
  f.Uploaded(From(2), 0, 3, 1);
  EXPECT_TRUE(rec.closes.empty()) << "client 3 has not uploaded yet";
  f.RemoveClient(3, 2, 2);
  ASSERT_EQ(rec.closes.size(), 1u) << "everyone still alive uploaded";
  EXPECT_EQ(rec.closes[0].workers_size(), 2);
  EXPECT_EQ(f.clients().at(3).missed, 1);
  // A server that dies while the round closes does not hold the run up.
  f.OnClosed(100, 0, 2, 3);
  rec.servers = {100};
  f.RemoveServer(101, 2, 3);
  EXPECT_EQ(f.round(), 1);
}

TEST(FedRoundsTest, AllClientsRoundsWaitForEveryLiveClient) {
  Recorder rec;
  FedRounds f({.rounds = 2}, rec.Actions());
  f.CheckIn(From(1), 2, 0);
  EXPECT_TRUE(rec.tasks.empty());
  f.RemoveClient(2, 1, 1);  // the other client left before checking in
  EXPECT_EQ(Selected(rec, 0), (std::vector<int32_t>{1}));
}

TEST(FedRoundsTest, AnEvaluatorIsAnsweredOnceTheRoundsItWatchesAreAppliedAndIsNoClient) {
  Recorder rec;
  FedRounds f({.rounds = 2}, rec.Actions());  // every client each round
  f.Watch(From(9), 1, 3, 0);                  // the evaluator: 3 live workers, 2 clients
  f.CheckIn(From(1), 3, 0);
  EXPECT_TRUE(rec.tasks.empty());
  f.CheckIn(From(2), 3, 0);
  EXPECT_EQ(Selected(rec, 0).size(), 2u) << "the evaluator is not waited for";
  f.Uploaded(From(1), 0, 3, 1);
  f.Uploaded(From(2), 0, 3, 1);
  f.OnClosed(100, 0, 3, 2);
  EXPECT_TRUE(rec.watches.empty()) << "server 101 has not applied round 0";
  f.OnClosed(101, 0, 3, 2);
  ASSERT_TRUE(rec.watches.contains(9));
  EXPECT_EQ(rec.watches[9].round(), 1);
  EXPECT_FALSE(rec.watches[9].finished());
  f.Watch(From(9), 5, 3, 2);  // more rounds than the run has: answered when it ends
  f.CheckIn(From(1), 3, 2);
  f.CheckIn(From(2), 3, 2);
  f.Uploaded(From(1), 1, 3, 3);
  f.Uploaded(From(2), 1, 3, 3);
  CloseOnServers(f, rec, 3, 4);
  EXPECT_EQ(rec.watches[9].round(), 2);
  EXPECT_TRUE(rec.watches[9].finished());
}

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

constexpr char kRoundsHeader[] =
    "aggregation,wall_s,kept,dropped,staleness_mean,staleness_max,bytes_up,bytes_down,test_loss,"
    "test_accuracy,kept_ranks,dropped_ranks,late,host_s,epsilon,clip\n";

proto::FedRound Bytes(int64_t up, int64_t down) {
  proto::FedRound r;
  r.set_bytes_up(up);
  r.set_bytes_down(down);
  return r;
}

// One row per aggregation applied on every server, written once applied: its uploads kept and
// dropped, the bytes every client reported so far, from the first round's opening.
TEST(FedRoundsTest, TheRoundsLogHasOneRowPerAppliedRound) {
  ScratchDir dir("fed_rounds_test");
  std::filesystem::create_directories(dir.path());
  const auto csv = dir.path() / "r.csv";
  Recorder rec;
  FedRounds f({.clients_per_round = 1, .overcommit = 2, .rounds = 2, .csv_path = csv.string()},
              rec.Actions());
  f.CheckIn(From(1), 2, 0);
  f.Report(2, Bytes(999, 999));  // every report's bytes count
  f.CheckIn(From(2), 2, 0.5);
  f.Report(2, Bytes(100, 400));
  f.Uploaded(From(2), 0, 2, 1.25);
  EXPECT_EQ(Slurp(csv), "") << "no row before the servers applied the round";
  CloseOnServers(f, rec, 2, 1.5);
  EXPECT_EQ(Slurp(csv), std::string(kRoundsHeader) + "1,1.000,1,1,0.00,0,1099,1399,,,1,0,0,,,\n");
  f.Report(1, Bytes(50, 400));  // uploaded late: dropped with round 0, its bytes count
  f.Uploaded(From(1), 0, 2, 1.6);
  f.CheckIn(From(1), 2, 1.7);
  f.CheckIn(From(2), 2, 1.7);
  const int32_t second = Selected(rec, 1)[0];
  f.Uploaded(From(second), 1, 2, 2);
  CloseOnServers(f, rec, 2, 2.5);
  EXPECT_EQ(Slurp(csv), std::string(kRoundsHeader) + "1,1.000,1,1,0.00,0,1099,1399,,,1,0,0,,,\n" +
                            "2,2.000,1,1,0.00,0,1149,1799,,," + std::to_string(second - 1) + "," +
                            std::to_string(second == 1 ? 1 : 0) + ",0,,,\n");
}

// An evaluator's measurement goes on the row of the aggregation it measured after, which is
// held back until it arrives; rows it cannot measure any more are written at once.
TEST(FedRoundsTest, AnEvaluatorsMeasurementGoesOnItsRoundsRow) {
  ScratchDir dir("fed_rounds_test");
  std::filesystem::create_directories(dir.path());
  const auto csv = dir.path() / "r.csv";
  Recorder rec;
  FedRounds f({.clients_per_round = 1, .rounds = 3, .csv_path = csv.string()}, rec.Actions());
  f.Watch(From(9), 2, 2, 0);  // measures after 2 rounds
  f.CheckIn(From(1), 2, 0);
  auto round = [&](int64_t r, double t) {
    f.Uploaded(From(1), r, 2, t);
    CloseOnServers(f, rec, 2, t);
    f.CheckIn(From(1), 2, t);
  };
  round(0, 1);
  EXPECT_NE(Slurp(csv).find("\n1,1.000,"), std::string::npos) << "row 1 is not measured";
  round(1, 2);
  ASSERT_EQ(rec.watches[9].round(), 2);
  EXPECT_EQ(Slurp(csv).find("\n2,"), std::string::npos) << "row 2 waits for the evaluator";
  round(2, 3);
  EXPECT_EQ(Slurp(csv).find("\n2,"), std::string::npos);
  proto::Evaluation e;
  e.set_round(2);
  e.set_loss(0.5);
  e.set_accuracy(0.75);
  f.Measured(9, e);
  f.Watch(From(9), 3, 2, 3.5);  // answered at once (3 rounds closed): row 3 waits again
  const std::string text = Slurp(csv);
  EXPECT_NE(text.find("\n2,2.000,1,0,0.00,0,0,0,0.5000,0.7500,0,,0,,,\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("\n3,"), std::string::npos);
  f.RemoveClient(9, 1, 4);  // the evaluator left: nothing holds row 3
  EXPECT_NE(Slurp(csv).find("\n3,3.000,1,0,"), std::string::npos);
  const auto summary = nlohmann::json::parse(f.SummaryJson());
  EXPECT_EQ(summary["measured"], nlohmann::json::parse("[[2, 2.0, 0.75, 0]]"));
}

TEST(FedRoundsTest, TheSummaryAndTheClientsLogShowEachClientsState) {
  ScratchDir dir("fed_rounds_test");
  std::filesystem::create_directories(dir.path());
  Recorder rec;
  FedRounds f({.clients_per_round = 1, .rounds = 1, .csv_path = (dir.path() / "r.csv").string()},
              rec.Actions());
  EXPECT_EQ(f.SummaryJson(), "") << "no client yet";
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  const int32_t picked = Selected(rec, 0)[0];
  const int32_t gone = picked == 3 ? 2 : 3;
  f.RemoveClient(gone, 2, 0.5);
  const auto summary = nlohmann::json::parse(f.SummaryJson());
  EXPECT_EQ(summary["mode"], "rounds");
  EXPECT_EQ(summary["clients"]["training"], 1);
  EXPECT_EQ(summary["clients"]["idle"], 1);
  EXPECT_EQ(summary["clients"]["left"], 1);
  EXPECT_EQ(summary["per_client"][std::to_string(picked - 1)]["state"], "training");
  f.Uploaded(From(picked), 0, 2, 1);
  CloseOnServers(f, rec, 2, 2);
  ASSERT_TRUE(f.finished());
  const std::string text = Slurp(dir.path() / "clients.csv");
  EXPECT_NE(text.find("rank,state,slowdown,up_mbps,down_mbps,latency_ms,loss,selected,kept,missed,"
                      "bytes_up,bytes_down,mean_round_trip_s\n"),
            std::string::npos);
  EXPECT_NE(text.find(std::to_string(picked - 1) + ",away,1.000,0.000,0.000,0.0,0.0000,1,1,0,0,0,"
                                                   "1.000\n"),
            std::string::npos)
      << text;
}

TEST(FedRoundsTest, OptionsAreValidated) {
  EXPECT_TRUE(ValidateFedRoundsOptions({}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.clients_per_round = -1}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.overcommit = 0.5}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.deadline_s = -1}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.selection = "nonesuch"}).ok());
}

// The open tasks of an asynchronous run: worker -> task.
std::map<int32_t, int64_t> Tasks(const Recorder& r) {
  std::map<int32_t, int64_t> open;
  for (const auto& [w, t] : r.tasks) {
    if (!t.finished()) open[w] = t.round();
  }
  return open;
}

TEST(FedRoundsAsyncTest, AtMostCClientsHoldATaskAndEachUploadIsCommittedOnItsOwn) {
  Recorder rec;
  FedRounds f({.rounds = 10, .concurrency = 2}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 4, 0);
  EXPECT_TRUE(rec.tasks.empty()) << "the first task waits for every live client";
  f.CheckIn(From(4), 4, 0);
  std::map<int32_t, int64_t> open = Tasks(rec);
  ASSERT_EQ(open.size(), 2u);
  std::set<int64_t> ids;
  for (const auto& [w, t] : open) ids.insert(t);
  EXPECT_EQ(ids, (std::set<int64_t>{0, 1}));
  const int32_t first = open.begin()->first;
  const int64_t task = open.begin()->second;
  f.Uploaded(From(first), task, 4, 1);
  EXPECT_TRUE(rec.answers[first].kept());
  ASSERT_EQ(rec.closes.size(), 1u);
  EXPECT_EQ(rec.closes[0].round(), task);
  EXPECT_EQ(std::vector<int32_t>(rec.closes[0].workers().begin(), rec.closes[0].workers().end()),
            (std::vector<int32_t>{first}));
  // Its slot frees once every server applied it: then it goes to an idle client, as task 2.
  auto granted = [&] {
    int n = 0;
    for (const auto& [w, t] : rec.tasks) n += t.round() == 2 ? 1 : 0;
    return n;
  };
  EXPECT_EQ(granted(), 0);
  EXPECT_EQ(f.round(), 0) << "not applied anywhere yet";
  f.OnClosed(100, task, 4, 2);
  EXPECT_EQ(granted(), 0);
  f.OnClosed(101, task, 4, 2);
  EXPECT_EQ(f.round(), 1) << "one commit applied on every server";
  EXPECT_EQ(granted(), 1);
}

TEST(FedRoundsAsyncTest, TasksOfClientsThatComeBackDieOrRunLateAreGivenUp) {
  Recorder rec;
  FedRounds f({.deadline_s = 5, .rounds = 10, .concurrency = 3}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  const std::map<int32_t, int64_t> open = Tasks(rec);
  ASSERT_EQ(open.size(), 3u);
  auto dropped = [&](int64_t task) {
    for (const proto::FedRound& c : rec.closes) {
      if (c.round() == task && c.workers().empty()) return true;
    }
    return false;
  };
  f.CheckIn(From(1), 3, 1);  // back without reporting its task
  EXPECT_TRUE(dropped(open.at(1)));
  f.RemoveClient(2, 2, 2);
  EXPECT_TRUE(dropped(open.at(2)));
  f.Tick(2, 4.9);
  EXPECT_FALSE(dropped(open.at(3)));
  f.Tick(2, 5.0);
  EXPECT_TRUE(dropped(open.at(3)));
  f.Uploaded(From(3), open.at(3), 2, 6);
  EXPECT_FALSE(rec.answers[3].kept()) << "its task was given up";
  EXPECT_EQ(f.clients().at(3).missed, 1);
  EXPECT_EQ(f.clients().at(1).consecutive_missed, 1);
}

TEST(FedRoundsAsyncTest, TheRunEndsAfterItsCommittedUploads) {
  Recorder rec;
  FedRounds f({.rounds = 2, .concurrency = 3}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  f.Watch(From(9), 2, 4, 0);
  const std::map<int32_t, int64_t> open = Tasks(rec);
  ASSERT_EQ(open.size(), 3u);
  f.Uploaded(From(1), open.at(1), 4, 1);
  f.Uploaded(From(2), open.at(2), 4, 1);
  f.Uploaded(From(3), open.at(3), 4, 1);
  EXPECT_FALSE(rec.answers[3].kept()) << "two uploads were all the run wanted";
  for (int64_t t : {open.at(1), open.at(2)}) {
    f.OnClosed(100, t, 4, 2);
    f.OnClosed(101, t, 4, 2);
  }
  EXPECT_TRUE(f.finished());
  EXPECT_TRUE(rec.watches[9].finished());
  f.CheckIn(From(1), 4, 3);
  EXPECT_TRUE(rec.tasks[1].finished());
}

TEST(FedRoundsAsyncTest, AQuorumGroupsKUploadsIntoOneAggregation) {
  Recorder rec;
  FedRounds f({.deadline_s = 10, .rounds = 5, .concurrency = 3, .quorum = 2}, rec.Actions());
  for (int32_t w = 1; w <= 4; ++w) f.CheckIn(From(w), 4, 0);
  std::map<int32_t, int64_t> open = Tasks(rec);
  ASSERT_EQ(open.size(), 3u);
  auto it = open.begin();
  const auto [w1, t1] = *it++;
  const auto [w2, t2] = *it++;
  const auto [w3, t3] = *it;
  f.Uploaded(From(w1), t1, 4, 1);
  EXPECT_TRUE(rec.closes.empty()) << "a group waits for its second upload";
  f.Uploaded(From(w2), t2, 4, 2);
  ASSERT_EQ(rec.closes.size(), 1u);
  const proto::FedRound& group = rec.closes[0];
  EXPECT_EQ(std::vector<int32_t>(group.workers().begin(), group.workers().end()),
            (std::vector<int32_t>{w1, w2}));
  EXPECT_EQ(std::vector<int64_t>(group.tasks().begin(), group.tasks().end()),
            (std::vector<int64_t>{t1, t2}));
  // Both keep their slots until the group is applied; then two of the idle get tasks 3 and 4.
  auto last_task = [&] {
    int64_t last = -1;
    for (const auto& [w, t] : rec.tasks) last = std::max(last, t.round());
    return last;
  };
  f.CheckIn(From(w1), 4, 2);
  f.CheckIn(From(w2), 4, 2);
  EXPECT_EQ(last_task(), 2);
  f.OnClosed(100, group.round(), 4, 3);
  f.OnClosed(101, group.round(), 4, 3);
  EXPECT_EQ(f.round(), 1) << "one aggregation applied";
  EXPECT_EQ(last_task(), 4);
  // A lone upload closes at the deadline with what it has.
  auto groups = [&] {
    size_t n = 0;
    for (const proto::FedRound& c : rec.closes) n += c.workers_size() > 0 ? 1 : 0;
    return n;
  };
  f.Uploaded(From(w3), t3, 4, 4);
  EXPECT_EQ(groups(), 1u);
  f.Tick(4, 13.9);
  EXPECT_EQ(groups(), 1u);
  f.Tick(4, 14.0);
  ASSERT_EQ(groups(), 2u);
  EXPECT_EQ(rec.closes.back().workers_size(), 1);
}

TEST(FedRoundsAsyncTest, AnAutomaticQuorumFollowsTheClientsTrainingTimes) {
  Recorder rec;
  FedRounds f({.rounds = 10, .concurrency = 3, .quorum = 0}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  const std::map<int32_t, int64_t> open = Tasks(rec);
  // With fewer than two clients measured the group waits for every slot.
  f.Uploaded(From(1), open.at(1), 3, 1);
  EXPECT_TRUE(rec.closes.empty());
  // Two took 1 s: K = 2.
  f.Uploaded(From(2), open.at(2), 3, 1);
  ASSERT_EQ(rec.closes.size(), 1u);
  EXPECT_EQ(rec.closes[0].workers_size(), 2);
  // The third took 10 s: K stays 2 (2 uploads a second against 0.3 for K = 3), so it waits.
  f.Uploaded(From(3), open.at(3), 3, 10);
  EXPECT_EQ(rec.closes.size(), 1u);
}

// Asynchronous rows: one per commit applied everywhere, with its staleness (aggregations
// applied since its client pulled) and the tasks given up since the previous row.
TEST(FedRoundsAsyncTest, TheRoundsLogShowsEachCommitsStalenessAndTheDroppedTasks) {
  ScratchDir dir("fed_rounds_test");
  std::filesystem::create_directories(dir.path());
  const auto csv = dir.path() / "r.csv";
  Recorder rec;
  FedRounds f({.rounds = 3, .csv_path = csv.string(), .concurrency = 2}, rec.Actions());
  for (int32_t w = 1; w <= 3; ++w) f.CheckIn(From(w), 3, 0);
  std::map<int32_t, int64_t> open = Tasks(rec);
  ASSERT_EQ(open.size(), 2u);
  const int32_t a = open.begin()->first, b = std::next(open.begin())->first;
  f.Uploaded(From(a), open[a], 3, 1);  // commit, applied at once: staleness 0
  CloseOnServers(f, rec, 3, 1);
  const int32_t c = 6 - a - b;  // granted the slot a's commit held once it was applied
  ASSERT_TRUE(Tasks(rec).contains(c));
  f.RemoveClient(c, 2, 1.5);  // c's task is given up
  f.Uploaded(From(b), open[b], 2, 2);
  CloseOnServers(f, rec, 2, 2);
  const std::string text = Slurp(csv);
  EXPECT_NE(text.find("\n1,1.000,1,0,0.00,0,0,0,,," + std::to_string(a - 1) + ",,0,,,\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n2,2.000,1,1,1.00,1,0,0,,," + std::to_string(b - 1) + "," +
                      std::to_string(c - 1) + ",0,,,\n"),
            std::string::npos)
      << "b pulled before aggregation 1 was applied: staleness 1\n"
      << text;
}

TEST(FedRoundsAsyncTest, AQuorumAboveTheConcurrencyIsRefused) {
  EXPECT_FALSE(ValidateFedRoundsOptions({.concurrency = 2, .quorum = 3}).ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.quorum = -1}).ok());
  EXPECT_TRUE(ValidateFedRoundsOptions({.concurrency = 4, .quorum = 0}).ok());
  // Without asynchronous rounds a quorum would do nothing: refused, saying so.
  for (int quorum : {0, 2}) {
    Status s = ValidateFedRoundsOptions({.clients_per_round = 5, .quorum = quorum});
    EXPECT_FALSE(s.ok()) << quorum;
    EXPECT_NE(s.message().find("--concurrency"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(ValidateFedRoundsOptions({.clients_per_round = 5, .quorum = 1}).ok());
}

TEST(SelectionTest, RandomPicksDistinctIdleClientsDependingOnlyOnTheSeed) {
  auto policy = MakeSelection("random");
  ASSERT_TRUE(policy.ok());
  std::vector<ClientRecord> records(10);
  for (int i = 0; i < 10; ++i) records[i].id = 20 + i;
  std::vector<const ClientRecord*> idle, reversed;
  for (const ClientRecord& r : records) idle.push_back(&r);
  reversed.assign(idle.rbegin(), idle.rend());
  std::mt19937_64 a(5), b(5);
  std::vector<int32_t> x = (*policy)->Select(idle, 4, 0, 10, a);
  std::vector<int32_t> y = (*policy)->Select(reversed, 4, 0, 10, b);
  EXPECT_EQ(x, y) << "the draw must not depend on arrival order";
  std::sort(x.begin(), x.end());
  EXPECT_EQ(std::unique(x.begin(), x.end()), x.end());
  EXPECT_EQ(x.size(), 4u);
  EXPECT_FALSE(MakeSelection("random:bogus=1").ok());
}

}  // namespace
}  // namespace hetps
