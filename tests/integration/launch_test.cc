// `hetps launch` end to end: a whole cluster from one command, a bad flag, and a worker killed
// mid-run.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

struct LaunchResult {
  int code = -1;
  std::string output;
};

// Runs `hetps launch <args>`; calls on_line(line, launcher_pid) for each output line.
LaunchResult Launch(const std::string& args,
                    const std::function<void(const std::string&, pid_t)>& on_line = nullptr) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execl("/bin/sh", "sh", "-c", ("exec " + Bin("hetps") + " launch " + args).c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  LaunchResult run;
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1) {
    run.output += c;
    if (c != '\n') {
      line += c;
      continue;
    }
    if (on_line) on_line(line, pid);
    line.clear();
  }
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  run.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return run;
}

// Pids of `parent`'s children whose command is `name`.
std::vector<pid_t> Children(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    pid_t pid = atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    size_t close_paren = text.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::string comm = text.substr(text.find('(') + 1, close_paren - text.find('(') - 1);
    char state;
    int ppid = 0;
    sscanf(text.c_str() + close_paren + 2, "%c %d", &state, &ppid);
    if (ppid == parent && comm == name) out.push_back(pid);
  }
  closedir(d);
  return out;
}

TEST(LaunchTest, RunsAWholeClusterAndExitsZero) {
  LaunchResult r = Launch(
      "--servers 2 --workers 3 --iterations=5 --progress_every=5 "
      "--tensor_elements=1000,300000 --partition_bytes=262144");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* tag :
       {"[scheduler] ", "[server 0] ", "[server 1] ", "[worker 0] ", "[worker 2] "}) {
    EXPECT_NE(r.output.find(tag), std::string::npos) << tag << " missing in\n" << r.output;
  }
  EXPECT_NE(r.output.find("iter 5/5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all 3 workers finished"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 partitions"), std::string::npos) << r.output;  // 1 + 2 for 300000
}

TEST(LaunchTest, UnknownFlagIsRefusedBeforeAnythingStarts) {
  LaunchResult r = Launch("--servers 1 --workers 1 --learning_rat=0.1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown flag '--learning_rat=0.1'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[scheduler]"), std::string::npos);
}

TEST(LaunchTest, KilledWorkerIsNamedAndTheOthersFinish) {
  pid_t victim = -1;
  LaunchResult r = Launch(
      "--servers 1 --workers 3 --iterations=400 --progress_every=20 --tensor_elements=2000 "
      "--heartbeat_timeout_ms=1000 --heartbeat_interval_ms=200",
      [&](const std::string& line, pid_t launcher) {
        if (victim < 0 && line.rfind("[worker 1]", 0) == 0 &&
            line.find("iter 20/") != std::string::npos) {
          auto workers = Children(launcher, "hetps-worker");
          ASSERT_EQ(workers.size(), 3u);
          victim = workers[1];
          kill(victim, SIGKILL);
        }
      });
  ASSERT_GT(victim, 0) << r.output;
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("(pid " + std::to_string(victim) + ") killed by signal 9"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("declared dead"), std::string::npos) << r.output;
  int finished = 0;
  for (size_t at = 0; (at = r.output.find("done: distance", at)) != std::string::npos; ++at)
    ++finished;
  EXPECT_EQ(finished, 2) << r.output;
}

}  // namespace
}  // namespace hetps::testing
