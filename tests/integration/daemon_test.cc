// What every daemon shares at start, on the real binaries: flags from HETPS_* environment
// variables (the command line wins; a bad value or an unknown variable is named), and
// --log_format=json (one JSON object per line); and `hetps health`, the check a container runs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

struct Exit {
  int code = -1;
  std::string output;
};

// Runs `env VARS... BINARY ARGS...`.
Exit Daemon(const std::vector<std::string>& vars, const std::string& binary,
            const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"env"};
  argv.insert(argv.end(), vars.begin(), vars.end());
  argv.push_back(Bin(binary));
  argv.insert(argv.end(), args.begin(), args.end());
  auto run = RunCaptured(argv, true);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return {};
  return {WIFEXITED(run->status) ? WEXITSTATUS(run->status) : -1, run->output};
}

TEST(DaemonTest, FlagsComeFromTheEnvironmentAndTheCommandLineWins) {
  Exit r = Daemon({"HETPS_WORKLOAD=nope"}, "hetps-worker", {"--check_flags"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nope"), std::string::npos) << r.output;
  r = Daemon({"HETPS_WORKLOAD=nope"}, "hetps-worker", {"--check_flags", "--workload=synthetic"});
  EXPECT_EQ(r.code, 0) << r.output;
  r = Daemon({"HETPS_NUM_WORKERS=many"}, "hetps-scheduler", {"--check_flags"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("HETPS_NUM_WORKERS='many'"), std::string::npos) << r.output;
  r = Daemon({"HETPS_NUM_WORKER=3"}, "hetps-scheduler", {"--check_flags"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("HETPS_NUM_WORKER is set but hetps-scheduler has no such flag"),
            std::string::npos)
      << r.output;
  r = Daemon({"HETPS_DURABILITY=sometimes"}, "hetps-server", {"--check_flags"});
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(DaemonTest, JsonLogsAreOneObjectPerLine) {
  Exit r = Daemon({"HETPS_LOG_FORMAT=json"}, "hetps-worker",
                  {"--check_flags", "--workload=\"quoted\"\tname"});
  EXPECT_EQ(r.code, 2) << r.output;
  std::istringstream lines(r.output);
  int objects = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    EXPECT_EQ(j.value("node", ""), "worker");
    EXPECT_FALSE(j.value("time", "").empty());
    if (j.value("level", "") == "error") {
      EXPECT_NE(j.value("msg", "").find("\"quoted\"\tname"), std::string::npos) << line;
      ++objects;
    }
  }
  EXPECT_EQ(objects, 1) << r.output;
  r = Daemon({}, "hetps-server", {"--log_format=xml", "--check_flags"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown --log_format 'xml'"), std::string::npos) << r.output;
}

TEST(DaemonTest, HealthIsTheSchedulerAnsweringAndANamedNodeAlive) {
  LocalCluster cluster({.servers = 1, .workers = 1});
  const std::string scheduler = "HETPS_SCHEDULER=" + cluster.endpoint();
  Exit r = Daemon({scheduler}, "hetps", {"health"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("healthy: the scheduler at"), std::string::npos) << r.output;
  // The cluster starts its server without waiting for it to register: a container's health
  // check retries in the same way until the node is up.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    r = Daemon({scheduler}, "hetps", {"health", "--role=server", "--rank=0"});
    if (r.code == 0 || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(r.code, 0) << r.output;
  r = Daemon({scheduler}, "hetps", {"health", "--role=worker", "--rank=3"});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("unhealthy: worker 3"), std::string::npos) << r.output;
  cluster.scheduler().Signal(SIGKILL);
  ASSERT_TRUE(cluster.scheduler().WaitExit(std::chrono::seconds(10)).has_value());
  r = Daemon({scheduler}, "hetps", {"health", "--timeout_ms=500"});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(Daemon({}, "hetps", {"health"}).code, 2) << "no scheduler given";
}

}  // namespace
}  // namespace hetps::testing
