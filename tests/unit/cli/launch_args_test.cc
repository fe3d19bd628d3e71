#include "cli/launch_args.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace hetps {
namespace {

TEST(LaunchArgsTest, ParsesOwnOptionsInBothForms) {
  auto a = ParseLaunchArgs({"--servers", "3", "--workers=5", "--lr=0.1", "--grace_ms=100"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->servers, 3);
  EXPECT_EQ(a->workers, 5);
  EXPECT_EQ(a->grace_ms, 100);
  EXPECT_EQ(a->extra_flags, std::vector<std::string>{"--lr=0.1"});
}

TEST(LaunchArgsTest, RejectsBadValuesAndStrayArguments) {
  EXPECT_FALSE(ParseLaunchArgs({"--servers", "0"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"--workers=two"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"--servers"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"workers"}).ok());
  EXPECT_EQ(ParseLaunchArgs({"--flagfile=/nonexistent/x"}).status().code(), StatusCode::kNotFound);
}

TEST(LaunchArgsTest, FlagfileComesFirstSoTheCommandLineWins) {
  const std::string path = ::testing::TempDir() + "/launch_args_test.flags";
  {
    std::ofstream f(path);
    f << "# cluster settings\n--lr=0.5\n\n--optimizer=adam  # inline comment\n";
  }
  auto a = ParseLaunchArgs({"--flagfile", path, "--lr=0.1"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->extra_flags, (std::vector<std::string>{"--lr=0.5", "--optimizer=adam", "--lr=0.1"}));
  {
    std::ofstream f(path);
    f << "lr=0.5\n";
  }
  EXPECT_EQ(ParseLaunchArgs({"--flagfile", path}).status().code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(LaunchArgsTest, LinksAreTheLaunchsOwnFromAFlagfileTooAndTheCommandLineWins) {
  EXPECT_EQ(ParseLaunchArgs({})->links, "transport");
  auto a = ParseLaunchArgs({"--links", "netns", "--netns_subnet=10.77"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->links, "netns");
  EXPECT_EQ(a->netns_subnet, "10.77");
  EXPECT_TRUE(a->extra_flags.empty());  // never routed to the workers
  for (const char* bad :
       {"--links=tc", "--netns_subnet=10", "--netns_subnet=10.300", "--netns_subnet=10.1.2"}) {
    EXPECT_EQ(ParseLaunchArgs({bad}).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  const std::string path = ::testing::TempDir() + "/launch_args_links.flags";
  {
    std::ofstream f(path);
    f << "--links=netns\n--lr=0.5\n";
  }
  a = ParseLaunchArgs({"--flagfile", path});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->links, "netns");
  EXPECT_EQ(a->extra_flags, std::vector<std::string>{"--lr=0.5"});
  a = ParseLaunchArgs({"--links=transport", "--flagfile", path});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->links, "transport");
  const std::vector<std::string> saved = SavedLaunchArgs(*ParseLaunchArgs({"--links=netns"}));
  EXPECT_NE(std::find(saved.begin(), saved.end(), "--links=netns"), saved.end());
  std::remove(path.c_str());
}

TEST(LaunchArgsTest, ReadsRoleFlagsFromHelpXml) {
  const std::string xml =
      "<flag><file>/build/gflags-x/src/gflags.cc</file><name>flagfile</name></flag>\n"
      "<flag><file>/src/server/main.cc</file><name>lr</name><meaning>m</meaning></flag>\n"
      "<flag><file>/src/server/main.cc</file><name>optimizer</name></flag>\n";
  EXPECT_EQ(RoleFlagsFromHelpXml(xml), (std::set<std::string>{"lr", "optimizer"}));
}

TEST(LaunchArgsTest, RoutesFlagsToTheRolesThatDefineThem) {
  std::map<std::string, std::set<std::string>> roles = {
      {"scheduler", {"log_level", "heartbeat_timeout_ms"}},
      {"server", {"log_level", "lr", "verbose"}},
      {"worker", {"log_level", "iterations"}}};
  auto routed =
      RouteFlags({"--lr=0.1", "--log_level=debug", "--iterations=3", "--noverbose"}, roles);
  ASSERT_TRUE(routed.ok());
  EXPECT_EQ((*routed)["scheduler"], std::vector<std::string>{"--log_level=debug"});
  EXPECT_EQ((*routed)["server"],
            (std::vector<std::string>{"--lr=0.1", "--log_level=debug", "--noverbose"}));
  EXPECT_EQ((*routed)["worker"], (std::vector<std::string>{"--log_level=debug", "--iterations=3"}));
  auto unknown = RouteFlags({"--lrr=0.1"}, roles);
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("--lrr"), std::string::npos);
  // One RocksDB folder per process: --data_dir without {i} gets one added, for the scheduler
  // and the servers; given with {i}, it is kept.
  auto dirs = RouteFlags(
      {"--data_dir=/var/hetps/"},
      {{"scheduler", {"data_dir"}}, {"server", {"data_dir"}}, {"worker", {"iterations"}}});
  ASSERT_TRUE(dirs.ok());
  EXPECT_EQ(dirs->at("scheduler"), std::vector<std::string>{"--data_dir=/var/hetps/{i}"});
  EXPECT_EQ(dirs->at("server"), std::vector<std::string>{"--data_dir=/var/hetps/{i}"});
  auto own = RouteFlags({"--data_dir=/d/node-{i}"}, {{"server", {"data_dir"}}});
  EXPECT_EQ(own->at("server"), std::vector<std::string>{"--data_dir=/d/node-{i}"});
}

TEST(LaunchArgsTest, RestartPolicy) {
  EXPECT_EQ(ParseLaunchArgs({})->max_restarts, 0);
  EXPECT_EQ(ParseLaunchArgs({"--restart=no"})->max_restarts, 0);
  EXPECT_EQ(ParseLaunchArgs({"--restart=on-failure"})->max_restarts, 3);
  EXPECT_EQ(ParseLaunchArgs({"--restart", "on-failure:5"})->max_restarts, 5);
  for (const char* bad : {"--restart=always", "--restart=on-failure:0", "--restart=on-failure:x",
                          "--restart=on-failure:"}) {
    auto r = ParseLaunchArgs({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("on-failure:N"), std::string::npos) << bad;
  }
}

TEST(LaunchArgsTest, SlowWorkers) {
  auto a = ParseLaunchArgs({"--workers=4", "--slow_worker=2:3", "--slow_worker", "0:1.5"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->slow_workers, (std::map<int, double>{{0, 1.5}, {2, 3.0}}));
  EXPECT_TRUE(a->extra_flags.empty());
  for (const char* bad : {"--slow_worker=2", "--slow_worker=x:3", "--slow_worker=1:0.5",
                          "--slow_worker=-1:2", "--slow_worker=1:2x", "--slow_worker=1:nan"}) {
    auto r = ParseLaunchArgs({"--workers=4", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("RANK:FACTOR"), std::string::npos) << bad;
  }
  auto beyond = ParseLaunchArgs({"--workers=2", "--slow_worker=2:3"});
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("ranks 0..1"), std::string::npos);
  auto rank = ParseLaunchArgs({"--workers=2", "--rank=1"});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("drop --rank"), std::string::npos);
}

// A run folder keeps what it was launched with (the flagfile expanded); --resume reads it back
// and the flags given with --resume come after, so they win.
TEST(LaunchArgsTest, ResumeReadsTheRunsArgumentsAndLetsNewFlagsWin) {
  const std::string dir = ::testing::TempDir() + "hetps-resume-args-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto first = ParseLaunchArgs(
      {"--servers=2", "--workers=3", "--restart=on-failure:2", "--slow_worker=1:2", "--lr=0.1"});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  {
    std::ofstream saved(dir + "/launch.args");
    for (const std::string& a : SavedLaunchArgs(*first)) saved << a << "\n";
  }
  auto resumed = ParseLaunchArgs({"--resume=" + dir, "--lr=0.2"});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->resume, dir);
  EXPECT_EQ(resumed->run_dir, dir);
  EXPECT_EQ(resumed->servers, 2);
  EXPECT_EQ(resumed->workers, 3);
  EXPECT_EQ(resumed->max_restarts, 2);
  EXPECT_EQ(resumed->slow_workers, (std::map<int, double>{{1, 2.0}}));
  EXPECT_EQ(resumed->extra_flags, (std::vector<std::string>{"--lr=0.1", "--lr=0.2"}));
  auto elsewhere = ParseLaunchArgs({"--resume", dir, "--run_dir=/tmp/other"});
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_NE(elsewhere.status().message().find("drop --run_dir"), std::string::npos);
  auto not_a_run = ParseLaunchArgs({"--resume=" + dir + "/absent"});
  ASSERT_FALSE(not_a_run.ok());
  EXPECT_NE(not_a_run.status().message().find("launch.args"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(LaunchArgsTest, HostsSetTheWorkersToTheirSlotsUnlessGiven) {
  auto a =
      ParseLaunchArgs({"-H", "a:2,b:3", "--ssh=ssh -p 2222", "--scheduler_port=9000", "--lr=0.1"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(HostList(a->hosts), "a:2,b:3");
  EXPECT_EQ(a->workers, 5);
  EXPECT_EQ(a->ssh, (std::vector<std::string>{"ssh", "-p", "2222"}));
  EXPECT_EQ(a->scheduler_port, 9000);
  EXPECT_EQ(a->extra_flags, std::vector<std::string>{"--lr=0.1"});
  auto given = ParseLaunchArgs({"-H=a:2,b:3", "--workers=2"});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->workers, 2);
  const std::string file = ::testing::TempDir() + "hetps-hostfile-" + std::to_string(getpid());
  std::ofstream(file) << "n1 slots=4\nn2\n";
  auto from_file = ParseLaunchArgs({"--hosts", file, "--remote_bin_dir=/opt/hetps/bin"});
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(HostList(from_file->hosts), "n1:4,n2:1");
  EXPECT_EQ(from_file->workers, 5);
  EXPECT_EQ(from_file->remote_bin_dir, "/opt/hetps/bin");
  std::filesystem::remove(file);
}

TEST(LaunchArgsTest, HostsRefuseBadValuesAndWhatOnlyWorksOnOneMachine) {
  EXPECT_FALSE(ParseLaunchArgs({"-H", "a:0"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"-H"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"-H=a", "--scheduler_port=70000"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"-H=a", "--ssh= "}).ok());
  EXPECT_EQ(ParseLaunchArgs({"--hosts=/nonexistent/hosts"}).status().code(), StatusCode::kNotFound);
  auto netns = ParseLaunchArgs({"-H=a:2", "--links=netns"});
  ASSERT_FALSE(netns.ok());
  EXPECT_NE(netns.status().message().find("--links=transport"), std::string::npos);
  // A run on several hosts keeps its checkpoints on the scheduler's host: no --resume here.
  const std::string dir = ::testing::TempDir() + "hetps-hosts-resume-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto first = ParseLaunchArgs({"-H=a:2,b:2", "--servers=2"});
  ASSERT_TRUE(first.ok());
  {
    std::ofstream saved(dir + "/launch.args");
    for (const std::string& a : SavedLaunchArgs(*first)) saved << a << "\n";
  }
  auto resumed = ParseLaunchArgs({"--resume=" + dir});
  ASSERT_FALSE(resumed.ok());
  EXPECT_NE(resumed.status().message().find("several hosts"), std::string::npos)
      << resumed.status().message();
  std::filesystem::remove_all(dir);
}

TEST(LaunchArgsTest, FlagName) {
  EXPECT_EQ(FlagName("--lr=0.1"), "lr");
  EXPECT_EQ(FlagName("--verbose"), "verbose");
  EXPECT_EQ(FlagName("-x"), "");
  EXPECT_EQ(FlagName("lr=1"), "");
}

}  // namespace
TEST(LaunchArgsTest, AWorkerCommandIsSplitAtSpacesAndSavedWithTheRun) {
  auto a = ParseLaunchArgs(
      {"--workers=2", "--worker_cmd=/usr/bin/python3  train.py --x=1", "--iterations=5"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->worker_cmd, (std::vector<std::string>{"/usr/bin/python3", "train.py", "--x=1"}));
  EXPECT_EQ(a->extra_flags, std::vector<std::string>{"--iterations=5"});
  const auto saved = SavedLaunchArgs(*a);
  EXPECT_NE(std::find(saved.begin(), saved.end(), "--worker_cmd=/usr/bin/python3 train.py --x=1"),
            saved.end());
  auto empty = ParseLaunchArgs({"--worker_cmd= "});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("--worker_cmd needs a command"), std::string::npos);
}

TEST(LaunchArgsTest, AWorkerCommandMayHostSeveralRanksPerProcessOnThisMachine) {
  auto a = ParseLaunchArgs({"--workers=7", "--worker_cmd=python3 c.py", "--workers_per_process=3"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->workers_per_process, 3);
  const auto saved = SavedLaunchArgs(*a);
  EXPECT_NE(std::find(saved.begin(), saved.end(), "--workers_per_process=3"), saved.end());
  const auto refused = [](const std::vector<std::string>& args, const std::string& why) {
    auto r = ParseLaunchArgs(args);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused({"--workers=4", "--workers_per_process=2"}, "for --worker_cmd programs");
  refused({"--workers=4", "--worker_cmd=p", "--workers_per_process=2", "--links=netns"},
          "--links=netns");
  refused({"--workers=4", "--worker_cmd=p", "--workers_per_process=2", "-H", "a:2,b:2"},
          "-H/--hosts");
  refused({"--workers=4", "--worker_cmd=p", "--workers_per_process=2", "--slow_worker=1:2"},
          "--device_spread");
  refused({"--workers=4", "--worker_cmd=p", "--workers_per_process=0"}, "workers_per_process");
}

}  // namespace hetps
