#include "cli/hosts.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli/run_aggregators.h"
#include "common/subprocess.h"
#include "common/supervisor.h"

namespace hetps {
namespace {

using namespace std::chrono_literals;

// Stands in for ssh: runs its last argument (the remote command line) with sh, as sshd runs it
// with the user's shell, its input being ssh's.
const std::vector<std::string> kFakeSsh = {
    "/bin/sh", "-c", "for a; do last=$a; done; exec /bin/sh -c \"$last\"", "ssh"};

TEST(HostsTest, ParsesHostListsWithSlots) {
  auto hosts = ParseHostList("a:2,alice@10.0.0.3,node-3.example:4");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].target, "a");
  EXPECT_EQ((*hosts)[0].slots, 2);
  EXPECT_EQ((*hosts)[1].target, "alice@10.0.0.3");
  EXPECT_EQ((*hosts)[1].address, "10.0.0.3");
  EXPECT_EQ((*hosts)[1].slots, 1);
  EXPECT_EQ((*hosts)[2].address, "node-3.example");
  EXPECT_EQ((*hosts)[2].slots, 4);
  EXPECT_EQ(HostList(*hosts), "a:2,alice@10.0.0.3:1,node-3.example:4");
}

TEST(HostsTest, RejectsWhatIsNotAHost) {
  for (const char* bad :
       {"", "a:0", "a:x", "a,,b", "-oProxyCommand=x", "a b", "a;rm", "[::1]:2", "a:2:3"}) {
    auto hosts = ParseHostList(bad);
    EXPECT_FALSE(hosts.ok()) << bad;
    if (!hosts.ok()) {
      EXPECT_EQ(hosts.status().message().rfind("-H: ", 0), 0u) << bad;
    }
  }
}

TEST(HostsTest, ReadsHostsFilesInBothStylesNamingTheBadLine) {
  const std::string path = ::testing::TempDir() + "hetps-hosts-" + std::to_string(getpid());
  std::ofstream(path) << "# the cluster\nnode1 slots=2\n\nnode2:3  # two GPUs\nnode3\n";
  auto hosts = ReadHostsFile(path);
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_EQ(HostList(*hosts), "node1:2,node2:3,node3:1");
  std::ofstream(path) << "node1\nnode2 slots=none\n";
  auto bad = ReadHostsFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":2:"), std::string::npos) << bad.status().message();
  std::ofstream(path) << "# nothing\n";
  EXPECT_FALSE(ReadHostsFile(path).ok());
  EXPECT_EQ(ReadHostsFile(path + ".absent").status().code(), StatusCode::kNotFound);
  std::filesystem::remove(path);
}

TEST(HostsTest, PlacesTheSchedulerFirstServersRoundRobinWorkersBySlots) {
  auto hosts = ParseHostList("a:1,b:1,c:2");
  ASSERT_TRUE(hosts.ok());
  auto p = PlaceOnHosts(*hosts, 4, 4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->scheduler, 0);
  EXPECT_EQ(p->servers, (std::vector<int>{0, 1, 2, 0}));
  EXPECT_EQ(p->workers, (std::vector<int>{0, 1, 2, 2}));
  // Each worker's index on its host: the GPU it takes there (--device=cuda); a local launch's
  // workers are all on this host.
  EXPECT_EQ(*WorkerLocalRanks(*hosts, 4, 4), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(*WorkerLocalRanks({}, 1, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(WorkerLocalRanks(*hosts, 1, 5).ok());
  EXPECT_EQ(PlacedOn(*p, 0), "scheduler, servers 0 3, workers 0");
  EXPECT_EQ(PlacedOn(*p, 2), "servers 2, workers 2-3");
  auto fewer = PlaceOnHosts(*hosts, 1, 2);
  ASSERT_TRUE(fewer.ok());
  EXPECT_EQ(fewer->workers, (std::vector<int>{0, 1}));
  EXPECT_EQ(PlacedOn(*fewer, 2), "nothing");
  auto more = PlaceOnHosts(*hosts, 1, 5);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("5 workers but the hosts have 4 slots"), std::string::npos)
      << more.status().message();
}

TEST(HostsTest, ShellQuoteSurvivesTheShell) {
  const std::vector<std::string> words = {"plain", "two words", "it's",        "$HOME",    "`x`",
                                          "a\"b",  "",          "back\\slash", "new\nline"};
  std::string line = "printf '%s|'";
  for (const std::string& w : words) line.append(" ").append(ShellQuote(w));
  auto run = RunCaptured({"/bin/sh", "-c", line});
  ASSERT_TRUE(run.ok());
  std::string expected;
  for (const std::string& w : words) expected.append(w).append("|");
  EXPECT_EQ(run->output, expected);
}

// Runs `argv` on a stand-in host as the launcher does (its session input held open until it
// ends); the exit description and the output.
std::pair<std::string, std::string> RunRemote(const std::vector<std::string>& argv) {
  const std::string out = ::testing::TempDir() + "hetps-hosts-out-" + std::to_string(getpid());
  Supervisor supervisor(SupervisorOptions{});
  auto child = supervisor.Start("worker", "worker 0@h", OverSsh(kFakeSsh, Host{"h", "h", 1}, argv),
                                out, /*stop_by_closing_input=*/true);
  if (!child.ok()) return {child.status().ToString(), ""};
  supervisor.WaitExit(**child, 10s);
  std::ifstream in(out);
  std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  return {(*child)->Describe(), output};
}

TEST(HostsTest, TheRemoteCommandRunsTheArgumentsAndReturnsTheirExitCode) {
  EXPECT_EQ(RunRemote({"printf", "%s|", "a b", "it's", "$HOME"}),
            std::make_pair(std::string("exited with code 0"), std::string("a b|it's|$HOME|")));
  EXPECT_EQ(RunRemote({"/bin/sh", "-c", "exit 7"}).first, "exited with code 7");
  // The process reads /dev/null, not the session's input.
  EXPECT_EQ(RunRemote({"/bin/sh", "-c", "cat; echo done"}).second, "done\n");
}

// The launcher stops a remote process by closing the session's input: the wrapper sends it
// SIGTERM, the process exits its own way (here with 3 from its trap) and that code comes back,
// well within the grace period (no SIGKILL).
TEST(HostsTest, ClosingTheSessionsInputSendsTheRemoteProcessSigterm) {
  SupervisorOptions options;
  options.grace_ms = 20000;
  Supervisor supervisor(options);
  Host host{"h", "h", 1};
  const std::string marker = ::testing::TempDir() + "hetps-hosts-term-" + std::to_string(getpid());
  std::filesystem::remove(marker);
  auto child =
      supervisor.Start("worker", "worker 0@h",
                       OverSsh(kFakeSsh, host,
                               {"/bin/sh", "-c",
                                "trap 'touch " + marker + "; exit 3' TERM; touch " + marker +
                                    ".up; while :; do "
                                    "sleep 0.05; done"}),
                       "", /*stop_by_closing_input=*/true);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  for (int i = 0; i < 200 && !std::filesystem::exists(marker + ".up"); ++i) supervisor.Pump(10);
  ASSERT_TRUE(std::filesystem::exists(marker + ".up"));
  EXPECT_FALSE(supervisor.WaitExit(**child, 200ms).has_value());  // it runs until stopped
  const auto start = std::chrono::steady_clock::now();
  supervisor.StopAll();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE((*child)->running());
  EXPECT_EQ((*child)->Describe(), "exited with code 3");
  EXPECT_TRUE(std::filesystem::exists(marker));
  std::filesystem::remove(marker);
  std::filesystem::remove(marker + ".up");
}

TEST(HostsTest, CheckHostsNamesTheHostAndTheMissingBinary) {
  auto hosts = ParseHostList("h1,h2");
  ASSERT_TRUE(hosts.ok());
  Status s = CheckHosts(kFakeSsh, *hosts, "/nonexistent/bin");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("2 of 2 hosts"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("h1: no executable /nonexistent/bin/hetps-scheduler"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(CheckHosts(kFakeSsh, *hosts, HETPS_BIN_DIR).ok());
  // ssh's own failure (exit 255) is reported as such, with what it said.
  const std::vector<std::string> refused = {
      "/bin/sh", "-c", "echo 'connect to host: Connection refused'; exit 255", "ssh"};
  // A host that does not answer in time (here: the stand-in ends as `timeout` does).
  s = CheckHosts({"/bin/sh", "-c", "exit 124", "ssh"}, *hosts, HETPS_BIN_DIR);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("h1: no answer in 30 s"), std::string::npos) << s.message();
  s = CheckHosts(refused, *hosts, HETPS_BIN_DIR);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("h2: ssh failed: connect to host: Connection refused"),
            std::string::npos)
      << s.message();
}

// --aggregators=N across hosts: one on each of the first N hosts that run workers, binding
// every address and dialled at its host's; more than those hosts, or with netns links, refused.
TEST(HostsTest, AggregatorsGoOnTheFirstHostsThatRunWorkers) {
  LaunchArgs args;
  auto hosts = ParseHostList("s,w1:2,w2:2");
  ASSERT_TRUE(hosts.ok());
  args.hosts = *hosts;
  args.servers = 1;
  args.workers = 5;  // s takes one worker (its one slot), w1 two, w2 two
  std::map<std::string, std::vector<std::string>> routed = {{"scheduler", {"--aggregators=2"}},
                                                            {"aggregator", {"--window_ms=5"}}};
  LocalClusterOptions cluster;
  auto n = SetUpAggregators(args, routed, cluster);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(cluster.aggregators, 2);
  EXPECT_EQ(cluster.aggregator_flags, std::vector<std::string>{"--window_ms=5"});
  auto placement = PlaceOnHosts(args.hosts, args.servers, args.workers);
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(AggregatorHost(*placement, 0), 0);  // s runs worker 0
  EXPECT_EQ(AggregatorHost(*placement, 1), 1);
  ASSERT_EQ(cluster.aggregator_own_flags.size(), 2u);
  EXPECT_EQ(cluster.aggregator_own_flags[1],
            (std::vector<std::string>{"--bind=tcp://*:*", "--advertise=tcp://w1:*"}));
  routed["scheduler"] = {"--aggregators=4"};
  EXPECT_EQ(SetUpAggregators(args, routed, cluster).status().code(), StatusCode::kInvalidArgument);
  routed["scheduler"] = {"--aggregators=1"};
  args.hosts.clear();
  args.links = "netns";
  EXPECT_EQ(SetUpAggregators(args, routed, cluster).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hetps
