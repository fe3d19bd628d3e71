#include "cli/status.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scheduler/cluster_stats.h"
#include "scheduler/fed_rounds.h"

namespace hetps {
namespace {

using Json = nlohmann::json;

TEST(StatusArgsTest, Parses) {
  auto a = ParseStatusArgs({"--scheduler=tcp://127.0.0.1:7000", "--watch"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheduler, "tcp://127.0.0.1:7000");
  EXPECT_DOUBLE_EQ(a->watch_s, 2);
  EXPECT_FALSE(a->json);
  auto b = ParseStatusArgs({"--scheduler=tcp://h:1", "--watch=0.5", "--json", "--timeout_ms=9"});
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(b->watch_s, 0.5);
  EXPECT_TRUE(b->json);
  EXPECT_EQ(b->timeout_ms, 9);
  for (std::vector<std::string> bad : {std::vector<std::string>{"--watch"},
                                       {"--scheduler=tcp://h:1", "--watch=0.01"},
                                       {"--scheduler=tcp://h:1", "--watch=x"},
                                       {"--scheduler=tcp://h:1", "--top"},
                                       {"--scheduler=tcp://h:1", "--timeout_ms=0"}}) {
    EXPECT_FALSE(ParseStatusArgs(bad).ok()) << bad.back();
  }
}

TEST(StatusRenderTest, TablesShowWorkersServersLayersAndTheStraggler) {
  ClusterStats stats(1, 2);
  proto::NodeInfo s;
  s.set_id(1);
  s.set_role(proto::SERVER);
  s.set_address("tcp://127.0.0.1:5555");
  stats.OnJoin(s, 0);
  for (int32_t r = 0; r < 2; ++r) {
    proto::NodeInfo w;
    w.set_id(2 + r);
    w.set_role(proto::WORKER);
    w.set_rank(r);
    stats.OnJoin(w, 0);
  }
  proto::WorkerReport fast, slow;
  fast.set_clock(40);
  slow.set_clock(12);
  for (int i = 0; i < 6; ++i) fast.add_iteration_ms(10), slow.add_iteration_ms(40);
  fast.add_transports("shm");  // how each server rank is reached
  slow.add_transports("socket");
  stats.OnWorkerReport(2, fast, 1);
  stats.OnWorkerReport(3, slow, 1);
  proto::ServerReport sr;
  sr.set_partitions(3);
  proto::LayerReport* l = sr.add_layers();
  l->set_layer(0);
  l->set_pushes(52);
  stats.OnServerReport(1, sr, 1);
  stats.Update(1);
  auto text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("stragglers 1"), std::string::npos) << *text;
  EXPECT_NE(text->find("STRAGGLER (slow)"), std::string::npos) << *text;
  EXPECT_NE(text->find("tcp://127.0.0.1:5555"), std::string::npos) << *text;
  EXPECT_NE(text->find("LAYER"), std::string::npos) << *text;
  // The straggler's row is rank 1's.
  const size_t row = text->find("\n   1    3 alive");
  ASSERT_NE(row, std::string::npos) << *text;
  EXPECT_LT(text->find("STRAGGLER", row), text->find('\n', row + 1));
  EXPECT_LT(text->find(" socket ", row), text->find('\n', row + 1)) << *text;
  EXPECT_NE(text->find(" shm "), std::string::npos) << *text;
  EXPECT_NE(text->find(" VIA "), std::string::npos) << *text;
  EXPECT_EQ(text->find("last checkpoint"), std::string::npos) << "none was taken";
  stats.OnCheckpoint(750, "/runs/x/checkpoints/clock-000000750", 3 << 20, 0.25, 1);
  auto with_checkpoint = RenderStatus(stats.StatusJson(31));
  ASSERT_TRUE(with_checkpoint.ok());
  EXPECT_NE(with_checkpoint->find("last checkpoint: clock 750, 3.0 MiB written in 0.25 s, 30 s "
                                  "ago, /runs/x/checkpoints/clock-000000750\n\n"),
            std::string::npos)
      << *with_checkpoint;
}

// A server's sparse tables: a line each in the text, every figure in /api/status, the counts
// in /metrics labelled by table (its name escaped).
TEST(StatusRenderTest, SparseTablesShowTheirRowsMemoryAndHitRate) {
  ClusterStats stats(1, 1);
  proto::NodeInfo s;
  s.set_id(1);
  s.set_role(proto::SERVER);
  s.set_rank(0);
  stats.OnJoin(s, 0);
  proto::ServerReport sr;
  proto::TableReport* t = sr.add_tables();
  t->set_name("user\"id");
  t->set_rows(1000);
  t->set_bytes(86000);
  t->set_row_bytes(68);
  t->set_hits(750);
  t->set_misses(250);
  t->set_evicted(12);
  stats.OnServerReport(1, sr, 1);
  const std::string json = stats.StatusJson(1);
  const nlohmann::json status = nlohmann::json::parse(json);
  const nlohmann::json& table = status["servers"][0]["tables"][0];
  EXPECT_EQ(table["rows"], 1000);
  EXPECT_EQ(table["bytes_per_row"], 86.0);
  auto text = RenderStatus(json);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const size_t line = text->find("user\"id");
  ASSERT_NE(line, std::string::npos) << *text;
  EXPECT_NE(text->find("0.750", line), std::string::npos) << *text;
  EXPECT_NE(text->find("HIT_RATE"), std::string::npos) << *text;
  const std::string metrics = stats.Metrics(1);
  EXPECT_NE(metrics.find("hetps_table_rows{server=\"0\",node=\"1\",table=\"user\\\"id\"} 1000"),
            std::string::npos)
      << metrics;
}

// Rounds whose answers go nowhere, on one live server (9); ranks are node ids.
FedRounds::Actions QuietActions() {
  return {.answer_checkin = [](const Arrival&, const proto::FedRound&) {},
          .answer_upload = [](const Arrival&, const proto::FedRound&) {},
          .answer_watch = [](const Arrival&, const proto::FedRound&) {},
          .close = [](const proto::FedRound&) {},
          .live_servers = [] { return std::vector<int32_t>{9}; },
          .rank_of = [](int32_t id) { return id; }};
}

TEST(StatusRenderTest, FederatedRoundsShowTheirClientsByState) {
  ClusterStats stats(1, 3);
  EXPECT_EQ(RenderStatus(stats.StatusJson(1))->find("federated"), std::string::npos);
  FedRounds fed({.clients_per_round = 1, .rounds = 5}, QuietActions());
  fed.CheckIn({1, 1, "a"}, 3, 0);
  fed.CheckIn({2, 1, "b"}, 3, 0);
  fed.CheckIn({3, 1, "c"}, 3, 0);  // round 0 selects one of three
  stats.SetFederated(fed.SummaryJson());
  auto text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("federated (rounds, random): 0 of 5 aggregations applied; clients idle 2, "
                       "training 1, uploaded 0, away 0, left 0; evaluators 0; uploads kept 0, "
                       "dropped 0; uplink 0 B, downlink 0 B\n"),
            std::string::npos)
      << *text;
  proto::FedRound report;
  report.set_bytes_up(2048);
  fed.Report(1, report);
  fed.Watch({4, 1, "e"}, 1, 4, 0);  // an evaluator
  for (int32_t id = 1; id <= 3; ++id) fed.Uploaded({id, 1, "x"}, 0, 4, 1);
  fed.OnClosed(9, 0, 4, 1);
  proto::Evaluation e;
  e.set_round(1);
  e.set_accuracy(0.625);
  fed.Measured(4, e);
  stats.SetFederated(fed.SummaryJson());
  text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("1 of 5 aggregations applied"), std::string::npos) << *text;
  EXPECT_NE(text->find("uploads kept 1, dropped 0; uplink 2.0 KiB, downlink 0 B; test accuracy "
                       "0.6250 after 1 aggregations\n"),
            std::string::npos)
      << *text;
  // Under virtual time: the clock, what it holds, whom it waits for and whose turn goes.
  stats.SetVirtual(R"({"now_s": 12.25, "held": 3, "waiting_for": [2, 7], "turn": -1})");
  text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("virtual time 12.2 s: 3 requests held, waiting for ranks 2 7\n"),
            std::string::npos)
      << *text;
  // Under --dp: the epsilon the accountant spent, in the status and /metrics.
  FedRounds dp({.clients_per_round = 1, .rounds = 5, .dp = "central:clip=1,noise=1.1"},
               QuietActions());
  dp.CheckIn({1, 1, "a"}, 3, 0);
  stats.SetFederated(dp.SummaryJson());
  stats.SetPrivacy(dp.privacy().epsilon(), dp.privacy().spec().delta);
  text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("differential privacy central:clip=1,delta=1e-05,noise=1.1: epsilon "
                       "0.000 spent at delta 1e-05\n"),
            std::string::npos)
      << *text;
  EXPECT_NE(stats.Metrics(1).find("hetps_fed_dp_epsilon{delta=\"1e-05\"} 0"), std::string::npos)
      << stats.Metrics(1);
  stats.SetPrivacy(std::nullopt, 0);
  stats.SetFederated("");  // a data-centre run: the line without the federated one
  stats.SetVirtual(R"({"now_s": 3.5, "held": 1, "waiting_for": [], "turn": 4})");
  text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("virtual time 3.5 s: 1 requests held; rank 4's turn\n"), std::string::npos)
      << *text;
}

TEST(StatusRenderTest, RejectsWhatIsNotAStatus) {
  EXPECT_EQ(RenderStatus("not json").status().code(), StatusCode::kMalformed);
  EXPECT_EQ(RenderStatus("{\"workers\": []}").status().code(), StatusCode::kMalformed);
  EXPECT_EQ(RenderStatus("[1, 2]").status().code(), StatusCode::kMalformed);
}

// Found by fuzz/status_json_fuzz: an integer field holding a float far outside int's range was
// converted with undefined behaviour. It is refused as malformed; a float that is an int is read.
TEST(StatusRenderTest, IntegerFieldsOutOfRangeAreRefused) {
  ClusterStats stats(1, 2);
  Json j = Json::parse(stats.StatusJson(1));
  j["cluster"]["workers"] = 6.66667e+121;
  EXPECT_EQ(RenderStatus(j.dump()).status().code(), StatusCode::kMalformed);
  j["cluster"]["workers"] = -1e19;
  EXPECT_EQ(RenderStatus(j.dump()).status().code(), StatusCode::kMalformed);
  j["cluster"]["workers"] = 18446744073709551615u;
  EXPECT_EQ(RenderStatus(j.dump()).status().code(), StatusCode::kMalformed);
  j["cluster"]["workers"] = 2.0;
  auto text = RenderStatus(j.dump());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("workers 2"), std::string::npos) << *text;
}

}  // namespace
}  // namespace hetps
