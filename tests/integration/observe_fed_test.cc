// The dashboard in headless Chromium with 40 edge clients (hetps launch --workload=edge): the
// federated panel, a page of 25 clients, the evaluator's accuracy, the workers' pager and the
// charts. Chromium comes from deploy/install_deps.sh --tests; without it the test skips visibly.
// Unlike observe_test it times nothing, so it runs beside other tests. Also: a sparse table's
// panel and the layer-wise schedule's figures.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>

#include "tests/integration/local_cluster.h"
#include "tests/integration/observe_util.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {
namespace {

// The dashboard served on `port` as headless Chromium renders it (its DOM), and its exit code.
Ran DumpDashboard(const ScratchDir& tmp, int port) {
  return Shell(fmt::format(
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--user-data-dir={}/chromium --virtual-time-budget=3000 --dump-dom http://127.0.0.1:{}/ "
      "2>/dev/null",
      tmp.str(), port));
}

// 40 edge clients in sampled rounds: the dashboard's federated panel shows them by state, a page
// of 25 at a time, the evaluator's accuracy, and the workers table pages too.
TEST(ObserveTest, TheDashboardShowsFederatedClientsAPageAtATime) {
  if (!Have("chromium")) {
    GTEST_SKIP() << "SKIPPED: dashboard in Chromium (install the Debian package chromium)";
  }
  const int port = FreePort();
  const fs::path tmp = fs::temp_directory_path() / ("observe_fed_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  Child launch(Bin("hetps") + " launch --servers 1 --workers 41 --http_port=" +
               std::to_string(port) + " --run_dir=" + (tmp / "run").string() +
               " --workload=edge --evaluators=1 --init=worker --hidden=16 --consistency=selected"
               " --aggregator=fedavg --optimizer=sgd:lr=1 --clients_per_round=5 --rounds=100000"
               " --eval_every=1 --data_cache=" +
               (tmp / "cache").string());
  httplib::Client http("127.0.0.1", port);
  Json status;
  for (auto start = Clock::now(); Clock::now() - start < std::chrono::seconds(60);) {
    status = GetJson(http, "/api/status");
    if (status.is_object() && status["federated"].is_object() &&
        !status["federated"]["measured"].empty()) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(status.is_object() && status["federated"].is_object() &&
              !status["federated"]["measured"].empty())
      << status.dump() << launch.output();
  EXPECT_EQ(status["federated"]["per_client"].size(), 40u);

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string chromium =
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" +
      (tmp / "chromium").string() + " --window-size=1400,2400 --virtual-time-budget=5000 ";
  auto [code, dom] = Shell(chromium + "--dump-dom " + url + " 2>/dev/null");
  ASSERT_EQ(code, 0);
  const size_t panel = dom.find("id=\"federated\"");
  ASSERT_NE(panel, std::string::npos) << dom;
  EXPECT_EQ(dom.substr(panel, 60).find("hidden"), std::string::npos) << "the panel is shown";
  const size_t table = dom.find("<table id=\"fed-clients\">");
  ASSERT_NE(table, std::string::npos);
  const std::string clients = dom.substr(table, dom.find("</table>", table) - table);
  int rows = 0;
  for (size_t at = 0; (at = clients.find("<tr", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 1 + 25) << "the header and one page of 25 clients";
  EXPECT_NE(dom.find("rows 1–25 of 40"), std::string::npos) << "the clients' pager";
  EXPECT_NE(dom.find("rows 1–25 of 41"), std::string::npos) << "the workers' pager";
  EXPECT_NE(dom.find("class=\"chip idle"), std::string::npos);
  EXPECT_NE(dom.find("test accuracy 0."), std::string::npos) << "the evaluator's latest";
  EXPECT_NE(dom.find("slowest of 41 workers"), std::string::npos)
      << "the clock chart draws the spread, not 41 lines";
  int plots = 0;
  for (size_t at = 0; (at = dom.find("class=\"uplot", at)) != std::string::npos; ++at) ++plots;
  EXPECT_EQ(plots, 5) << "clocks, staleness, layers, loss/accuracy, federated accuracy";
  const fs::path shot = tmp / "dashboard-federated.png";
  auto [shot_code, shot_out] = Shell(chromium + "--screenshot=" + shot.string() + " " + url);
  EXPECT_EQ(shot_code, 0) << shot_out;
  EXPECT_EQ(launch.Stop(), 128 + SIGTERM);
  fs::remove_all(tmp);
}

// A sparse table's figures (docs/tables.md) in the dashboard: a row per server and table.
TEST(TableDashboardTest, TheDashboardShowsEachServersTables) {
  if (!Have("chromium")) GTEST_SKIP() << "SKIPPED: needs the Debian package chromium";
  ScratchDir tmp("hetps-table-dashboard");
  const int port = FreePort();
  LocalCluster cluster({.servers = 2,
                        .workers = 1,
                        .scheduler_flags = {"--http_port=" + std::to_string(port)},
                        .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTable("clicks", {.dim = 4, .init = "zeros"}).ok());
  ASSERT_TRUE(c.DeclareTensors({}).ok());
  std::vector<uint64_t> keys(300);
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<float> grads(keys.size() * 4, 1.0f);
  ASSERT_TRUE(c.PushRows("clicks", keys.data(), 300, grads.data()).Wait().ok());
  httplib::Client http("127.0.0.1", port);
  int64_t rows = 0;  // the servers report their tables with their heartbeats
  for (auto deadline = Clock::now() + std::chrono::seconds(10); rows < 300;) {
    ASSERT_LT(Clock::now(), deadline) << "the servers' tables never reached /api/status";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rows = 0;
    const Json status = GetJson(http, "/api/status");
    for (const Json& s : status["servers"]) {
      for (const Json& t : s.value("tables", Json::array())) rows += t["rows"].get<int64_t>();
    }
  }
  auto [code, dom] = DumpDashboard(tmp, port);
  ASSERT_EQ(code, 0);
  EXPECT_NE(dom.find("<div id=\"tables-section\">"), std::string::npos)
      << "the section is shown once a server has a table: " << dom;
  int shown = 0;  // a row per server: its rank, the table, its rows
  for (size_t at = 0; (at = dom.find("<td>clicks</td>", at)) != std::string::npos; ++at) ++shown;
  EXPECT_EQ(shown, 2) << dom;
}

// The layer-wise schedule (docs/layer-schedules.md) in the dashboard: the spec, the bytes saved,
// and per layer its push period and the bytes its workers accumulated instead of pushing.
TEST(LayerDashboardTest, TheDashboardShowsEachLayersPeriodAndSavings) {
  if (!Have("chromium")) GTEST_SKIP() << "SKIPPED: needs the Debian package chromium";
  ScratchDir tmp("hetps-layer-dashboard");
  const int port = FreePort();
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--http_port=" + std::to_string(port),
                                            "--layer_schedule=fixed:deep=4,deep_from=1"},
                        .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.heartbeat_interval_ms = 50; });
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors({{"a", {256}, 0}, {"b", {1024}, 1}}).ok());
  for (auto deadline = Clock::now() + std::chrono::seconds(10);
       c.layer_schedule().Period(1) != 4;) {
    ASSERT_LT(Clock::now(), deadline) << "the schedule never reached the worker";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  LayerAccumulator acc({{0, 256}, {1, 1024}});
  const std::vector<float> w(1024, 2.0f);
  for (int step = 0; step < 8; ++step) {
    std::vector<float> a(256, 1.0f), b(1024, 1.0f);  // a push's gradient becomes the sum
    acc.BeginStep(c.layer_schedule());
    acc.Measure(0, a.data(), w.data());
    acc.Measure(1, b.data(), w.data());
    if (acc.Offer(0, a.data())) {
      ASSERT_TRUE(c.Push("a", a.data(), 256).Wait().ok());
    }
    if (acc.Offer(1, b.data())) {
      ASSERT_TRUE(c.Push("b", b.data(), 1024).Wait().ok());
    }
    acc.Report(c);
    ASSERT_TRUE(c.Clock().ok());
  }
  httplib::Client http("127.0.0.1", port);
  int64_t saved = 0;  // 6 of layer 1's 8 steps waited: 6 x 4 KiB
  for (auto deadline = Clock::now() + std::chrono::seconds(10); saved < 6 * 4096;) {
    ASSERT_LT(Clock::now(), deadline) << "the savings never reached /api/status";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    saved = GetJson(http, "/api/status")["layer_schedule"]["deferred_bytes"].get<int64_t>();
  }
  EXPECT_EQ(saved, 6 * 4096);
  auto [code, dom] = DumpDashboard(tmp, port);
  ASSERT_EQ(code, 0);
  EXPECT_NE(dom.find("layer schedule fixed:combine=sum,deep=4,deep_from=1,shallow=1: 24.0 KiB "
                     "saved"),
            std::string::npos)
      << dom;
  // Layer 1's row ends with its period, relative gradient (||g||/||w|| = 1/2) and savings.
  EXPECT_NE(dom.find("<td>4</td><td>0.5000</td><td>24.0 KiB</td>"), std::string::npos) << dom;
}

}  // namespace
}  // namespace hetps::testing
