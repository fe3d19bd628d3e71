#include "scheduler/cluster_stats.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace hetps {
namespace {

using Json = nlohmann::json;

proto::NodeInfo Node(int32_t id, proto::Role role, int32_t rank) {
  proto::NodeInfo n;
  n.set_id(id);
  n.set_role(role);
  n.set_rank(rank);
  n.set_address(role == proto::SERVER ? "tcp://127.0.0.1:1" : "");
  return n;
}

// Servers 1 and 2, workers 3, 4, 5 (ranks 0, 1, 2).
ClusterStats Cluster() {
  ClusterStats stats(2, 3);
  stats.OnJoin(Node(1, proto::SERVER, 0), 0);
  stats.OnJoin(Node(2, proto::SERVER, 1), 0);
  for (int32_t r = 0; r < 3; ++r) stats.OnJoin(Node(3 + r, proto::WORKER, r), 0);
  return stats;
}

proto::WorkerReport Iterations(int64_t clock, std::vector<double> ms) {
  proto::WorkerReport r;
  r.set_clock(clock);
  for (double m : ms) r.add_iteration_ms(m);
  return r;
}

const Json* WorkerOf(const Json& status, int rank) {
  for (const Json& w : status["workers"]) {
    if (w["rank"] == rank) return &w;
  }
  return nullptr;
}

TEST(ClusterStatsTest, StatusFlagsTheSlowWorkerAndLowersTheQuorum) {
  ClusterStats stats = Cluster();
  for (int t = 1; t <= 6; ++t) {
    stats.OnWorkerReport(3, Iterations(t * 10, {10, 10}), t);
    stats.OnWorkerReport(4, Iterations(t * 3, {35}), t);
    stats.OnWorkerReport(5, Iterations(t * 10, {11, 9}), t);
  }
  EXPECT_TRUE(stats.Update(6));
  EXPECT_EQ(stats.Stragglers(), std::vector<int32_t>{4});
  EXPECT_EQ(stats.Quorum(), 2);
  const Json s = Json::parse(stats.StatusJson(6.5));
  const Json* slow = WorkerOf(s, 1);
  ASSERT_NE(slow, nullptr);
  EXPECT_TRUE((*slow)["straggler"].get<bool>());
  EXPECT_EQ((*slow)["straggler_reason"], "slow");
  EXPECT_EQ((*slow)["clock"], 18);
  EXPECT_DOUBLE_EQ((*slow)["iteration_ms"].get<double>(), 35);
  EXPECT_FALSE((*WorkerOf(s, 0))["straggler"].get<bool>());
  EXPECT_EQ(s["cluster"]["stragglers"], Json::array({4}));
  EXPECT_EQ(s["cluster"]["quorum"], 2);
  EXPECT_EQ(s["cluster"]["min_clock"], 18);
  EXPECT_EQ(s["cluster"]["max_clock"], 60);
  EXPECT_NEAR((*WorkerOf(s, 2))["heartbeat_age_ms"].get<double>(), 500, 1e-6);
}

TEST(ClusterStatsTest, DeadAndDepartedWorkersLeaveTheQuorum) {
  ClusterStats stats = Cluster();
  EXPECT_EQ(stats.Quorum(), 3);
  stats.OnDead(3, 1);
  stats.OnLeft(4, 1);
  EXPECT_EQ(stats.Quorum(), 1);
  stats.OnDead(5, 2);
  EXPECT_EQ(stats.Quorum(), 1);  // never below one
  const Json s = Json::parse(stats.StatusJson(2));
  EXPECT_EQ((*WorkerOf(s, 0))["state"], "dead");
  EXPECT_EQ((*WorkerOf(s, 1))["state"], "left");
  // Reports from a dead worker change nothing.
  stats.OnWorkerReport(3, Iterations(99, {1}), 3);
  EXPECT_EQ((*WorkerOf(Json::parse(stats.StatusJson(3)), 0))["clock"], 0);
}

TEST(ClusterStatsTest, StalenessIsAccountedExactly) {
  ClusterStats stats = Cluster();
  proto::WorkerReport a;
  for (int64_t n : {4, 3, 2, 0, 1}) a.add_staleness_counts(n);  // 4x0, 3x1, 2x2, 1x4
  stats.OnWorkerReport(3, a, 1);
  proto::WorkerReport b;
  for (int64_t n : {1, 1}) b.add_staleness_counts(n);  // 1x0, 1x1 more
  stats.OnWorkerReport(3, b, 2);
  proto::WorkerReport far;
  far.mutable_staleness_counts()->Resize(40, 0);
  far.set_staleness_counts(39, 2);  // beyond the last bucket: counted in it
  stats.OnWorkerReport(4, far, 2);

  const Json s = Json::parse(stats.StatusJson(2));
  const Json& w0 = *WorkerOf(s, 0);
  EXPECT_DOUBLE_EQ(w0["staleness"].get<double>(), (0 * 5 + 1 * 4 + 2 * 2 + 4 * 1) / 12.0);
  EXPECT_EQ(w0["staleness_max"], 4);
  EXPECT_EQ((*WorkerOf(s, 1))["staleness_max"], kStalenessBuckets - 1);
  const Json& h = s["staleness_histogram"];
  ASSERT_EQ(h["counts"].size(), static_cast<size_t>(kStalenessBuckets));
  EXPECT_EQ(h["counts"][0], 5);
  EXPECT_EQ(h["counts"][1], 4);
  EXPECT_EQ(h["counts"][kStalenessBuckets - 1], 2);
  EXPECT_TRUE(h["last_bucket_open"].get<bool>());

  // The same counts as a cumulative Prometheus histogram.
  const std::string m = stats.Metrics(2);
  EXPECT_NE(m.find("hetps_worker_push_staleness_bucket{worker=\"0\",node=\"3\",le=\"0\"} 5\n"),
            std::string::npos);
  EXPECT_NE(m.find("hetps_worker_push_staleness_bucket{worker=\"0\",node=\"3\",le=\"2\"} 11\n"),
            std::string::npos);
  EXPECT_NE(m.find("hetps_worker_push_staleness_bucket{worker=\"0\",node=\"3\",le=\"+Inf\"} 12\n"),
            std::string::npos);
  EXPECT_NE(m.find("hetps_worker_push_staleness_sum{worker=\"0\",node=\"3\"} 12\n"),
            std::string::npos);
  EXPECT_NE(m.find("hetps_worker_push_staleness_count{worker=\"1\",node=\"4\"} 2\n"),
            std::string::npos);
}

// What reaches the servers how (worker/transport.h): the bytes through co-located transports
// and a word per server rank, kept only in a bounded shape (reports are untrusted).
TEST(ClusterStatsTest, TransportsPerServerRankAndCoLocatedBytes) {
  ClusterStats stats = Cluster();
  proto::WorkerReport r;
  r.set_co_located_bytes(4096);
  r.add_transports("cma");
  r.add_transports("socket");
  stats.OnWorkerReport(3, r, 1);
  proto::WorkerReport odd;
  odd.add_transports("shm");
  odd.add_transports(std::string(40, 'x'));
  odd.add_transports("Bad Word");
  stats.OnWorkerReport(4, odd, 1);
  proto::WorkerReport many;
  for (int i = 0; i < 5000; ++i) many.add_transports("shm");
  stats.OnWorkerReport(5, many, 1);

  const Json s = Json::parse(stats.StatusJson(1));
  EXPECT_EQ((*WorkerOf(s, 0))["co_located_bytes"], 4096);
  EXPECT_EQ((*WorkerOf(s, 0))["transports"], Json({"cma", "socket"}));
  EXPECT_EQ((*WorkerOf(s, 1))["transports"], Json({"shm", "?", "?"}));
  EXPECT_TRUE((*WorkerOf(s, 2))["transports"].empty()) << "an oversized list is not kept";
  // A later report without the bytes does not lower the total.
  stats.OnWorkerReport(3, proto::WorkerReport(), 2);
  EXPECT_EQ((*WorkerOf(Json::parse(stats.StatusJson(2)), 0))["co_located_bytes"], 4096);
  EXPECT_NE(
      stats.Metrics(2).find("hetps_worker_co_located_bytes_total{worker=\"0\",node=\"3\"} 4096\n"),
      std::string::npos);
}

TEST(ClusterStatsTest, LayersAreSummedOverServersWithARate) {
  ClusterStats stats = Cluster();
  auto report = [](int64_t pushes0, int64_t pushes1) {
    proto::ServerReport r;
    r.set_pushes(pushes0 + pushes1);
    proto::LayerReport* l0 = r.add_layers();
    l0->set_layer(0);
    l0->set_pushes(pushes0);
    l0->set_bytes(pushes0 * 100);
    l0->set_staleness_sum(pushes0 * 2);
    l0->set_max_staleness(3);
    proto::LayerReport* l1 = r.add_layers();
    l1->set_layer(1);
    l1->set_pushes(pushes1);
    l1->set_bytes(pushes1 * 10);
    l1->set_max_staleness(1);
    return r;
  };
  stats.OnServerReport(1, report(100, 30), 10);
  stats.OnServerReport(2, report(50, 0), 10);
  stats.OnServerReport(1, report(160, 40), 11);  // +60 and +10 in one second
  stats.OnServerReport(2, report(80, 0), 11);    // +30
  const Json s = Json::parse(stats.StatusJson(11));
  ASSERT_EQ(s["layers"].size(), 2u);
  const Json& l0 = s["layers"][0];
  EXPECT_EQ(l0["pushes"], 240);
  EXPECT_EQ(l0["bytes"], 24000);
  EXPECT_DOUBLE_EQ(l0["mean_staleness"].get<double>(), 2.0);
  EXPECT_EQ(l0["max_staleness"], 3);
  EXPECT_DOUBLE_EQ(l0["pushes_per_min"].get<double>(), 60.0 * 90);
  EXPECT_DOUBLE_EQ(s["layers"][1]["pushes_per_min"].get<double>(), 60.0 * 10);
  EXPECT_DOUBLE_EQ(s["servers"][0]["requests_per_s"].get<double>(), 70);
  const std::string m = stats.Metrics(11);
  EXPECT_NE(m.find("hetps_layer_pushes_total{layer=\"0\"} 240\n"), std::string::npos);
  EXPECT_NE(m.find("hetps_layer_push_rate_per_minute{layer=\"1\"} 600\n"), std::string::npos);
}

TEST(ClusterStatsTest, RefusalsAreCountedInTheMetrics) {
  ClusterStats stats = Cluster();
  proto::ServerReport r;
  r.set_connections_refused(17);
  stats.OnServerReport(1, r, 1);
  stats.SetRefused({.messages = 3, .registrations = 2, .connections = 5});
  const std::string m = stats.Metrics(1);
  EXPECT_NE(m.find("hetps_server_connections_refused_total{server=\"0\",node=\"1\"} 17\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("hetps_scheduler_refused_total{what=\"message\"} 3\n"), std::string::npos);
  EXPECT_NE(m.find("hetps_scheduler_refused_total{what=\"registration\"} 2\n"), std::string::npos);
  EXPECT_NE(m.find("hetps_scheduler_refused_total{what=\"connection\"} 5\n"), std::string::npos);
}

TEST(ClusterStatsTest, CurveKeepsTrainerFiguresBounded) {
  ClusterStats stats(1, 1, {.curve_points = 8});
  stats.OnJoin(Node(1, proto::WORKER, 0), 0);
  for (int c = 1; c <= 20; ++c) {
    proto::WorkerReport r;
    proto::MetricPoint* p = r.add_metrics();
    p->set_clock(c);
    (*p->mutable_values())["loss"] = 1.0 / c;
    if (c % 5 == 0) (*p->mutable_values())["accuracy"] = 0.5 + c / 100.0;
    stats.OnWorkerReport(1, r, c);
  }
  const Json s = Json::parse(stats.StatusJson(20));
  EXPECT_LE(s["curve"].size(), 8u);
  EXPECT_EQ(s["curve"][0]["clock"], 1);  // thinning keeps the start
  EXPECT_DOUBLE_EQ(s["workers"][0]["metrics"]["loss"].get<double>(), 1.0 / 20);
  EXPECT_DOUBLE_EQ(s["workers"][0]["metrics"]["accuracy"].get<double>(), 0.7);
  const std::string m = stats.Metrics(20);
  EXPECT_NE(m.find("hetps_worker_test_accuracy_ratio{worker=\"0\",node=\"1\"} 0.7\n"),
            std::string::npos);
}

TEST(ClusterStatsTest, ClockHistoryIsSampledForTheDashboard) {
  ClusterStats stats(1, 2, {.history_points = 3});
  stats.OnJoin(Node(1, proto::WORKER, 0), 0);
  stats.OnJoin(Node(2, proto::WORKER, 1), 0);
  for (int t = 0; t < 5; ++t) {
    stats.OnWorkerReport(1, Iterations(t * 2, {}), t);
    stats.OnWorkerReport(2, Iterations(t, {}), t);
    stats.Update(t);
    stats.Update(t + 0.5);  // within history_every_s: no extra sample
  }
  const Json s = Json::parse(stats.StatusJson(5));
  EXPECT_EQ(s["history"]["t"], Json::array({2, 3, 4}));
  EXPECT_EQ(s["history"]["clock"]["0"], Json::array({4, 6, 8}));
  EXPECT_EQ(s["history"]["clock"]["1"], Json::array({2, 3, 4}));
}

TEST(ClusterStatsTest, MetricsCarryEveryFamilyWithHelpAndType) {
  ClusterStats stats = Cluster();
  stats.OnWorkerReport(3, Iterations(1, {12}), 1);
  const std::string m = stats.Metrics(1);
  for (const char* name :
       {"hetps_worker_clock", "hetps_worker_straggler", "hetps_worker_iteration_seconds",
        "hetps_worker_push_staleness", "hetps_worker_pushed_bytes_total",
        "hetps_worker_pulled_bytes_total", "hetps_server_requests_per_second",
        "hetps_server_parked_pulls", "hetps_layer_pushes_total", "hetps_cluster_quorum",
        "hetps_server_connections_refused_total", "hetps_scheduler_refused_total"}) {
    EXPECT_NE(m.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
    EXPECT_NE(m.find(std::string("# HELP ") + name + " "), std::string::npos) << name;
  }
  EXPECT_NE(
      m.find("hetps_worker_iteration_seconds_bucket{worker=\"0\",node=\"3\",le=\"0.01\"} 0\n"),
      std::string::npos);
  EXPECT_NE(
      m.find("hetps_worker_iteration_seconds_bucket{worker=\"0\",node=\"3\",le=\"0.025\"} 1\n"),
      std::string::npos);
}

TEST(ClusterStatsTest, IgnoresBadFiguresAndUnknownNodes) {
  ClusterStats stats = Cluster();
  stats.OnWorkerReport(3, Iterations(5, {-1, std::nan(""), 1e300 * 1e300}), 1);
  stats.OnWorkerReport(42, Iterations(5, {10}), 1);  // nobody
  proto::WorkerReport negative;
  negative.add_staleness_counts(-7);
  stats.OnWorkerReport(3, negative, 1);
  const Json s = Json::parse(stats.StatusJson(1));
  EXPECT_EQ((*WorkerOf(s, 0))["iterations"], 0);
  EXPECT_TRUE((*WorkerOf(s, 0))["iteration_ms"].is_null());
  EXPECT_EQ(s["staleness_histogram"]["counts"][0], 0);
  EXPECT_EQ(s["workers"].size(), 3u);
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

TEST(ClusterStatsTest, ARestartedServerIsRecoveringUntilItIsBack) {
  ClusterStats stats = Cluster();
  auto states = [&] {
    std::map<int, std::string> by_id;
    const Json status = Json::parse(stats.StatusJson(1));
    for (const Json& s : status["servers"]) {
      by_id[s["id"].get<int>()] = s["state"].get<std::string>();
    }
    return by_id;
  };
  stats.OnDead(2, 1);
  EXPECT_EQ(states()[2], "dead");
  stats.OnJoin(Node(6, proto::SERVER, 1), 1);  // restarted on its data dir, takes rank 1 over
  stats.OnServerRestarted(6, 2);
  EXPECT_EQ(states()[2], "replaced");
  EXPECT_EQ(states()[6], "recovering");
  stats.OnServerBack(6);
  EXPECT_EQ(states()[6], "alive");
  EXPECT_EQ(states()[1], "alive");
}

}  // namespace
}  // namespace hetps
