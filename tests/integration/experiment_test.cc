// `hetps experiment run` end to end: a small grid of real training runs on Fashion-MNIST
// (two algorithms, two settings, two seeds, a few dozen clocks each), its report, its resume.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

constexpr char kGrid[] =
    "# A small grid: two consistency models, with and without a straggler.\n"
    "--workload=train\n"
    "--hidden=32\n"
    "--optimizer=adam:lr=0.003\n"
    "--init=worker\n"
    "--iterations=30\n"
    "--eval_every=10\n"
    "--progress_every=10\n"
    "--workers=2\n"
    "--repeats=2\n"
    "--target=0.5\n"
    "--algorithm=bsp: --consistency=bsp\n"
    "--algorithm=asp: --consistency=asp\n"
    "--setting=even:\n"
    "--setting=straggler: --slow_worker=1:2\n";

struct Experiment {
  ScratchDir dir{"experiment_run_test"};
  std::string file, run_dir, log;
  Experiment() {
    std::filesystem::create_directories(dir.path());
    file = Path("grid.flags");
    run_dir = Path("runs");
    log = Path("experiment.log");
    std::ofstream(file) << kGrid;
  }
  std::string Path(const std::string& name) const { return (dir.path() / name).string(); }

  // Runs `hetps experiment <args>` to its end (at most `timeout`); its exit code, -1 if it
  // ran out of time (then it is killed).
  int Run(const std::vector<std::string>& args, std::chrono::seconds timeout) const {
    std::vector<std::string> argv = {Bin("hetps"), "experiment"};
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnOptions options;
    options.output_file = log;
    options.truncate = true;
    auto pid = Spawn(argv, options);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return -1;
    const auto end = std::chrono::steady_clock::now() + timeout;
    int st = 0;
    while (waitpid(*pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        kill(*pid, SIGKILL);
        waitpid(*pid, &st, 0);
        return -1;
      }
      std::this_thread::sleep_for(100ms);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
};

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(ExperimentRunTest, AGridOfRealRunsWritesItsResultsReportAndPlotsAndResumes) {
  Experiment e;
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir}, 240s), 0) << Slurp(e.log);
  const std::string output = Slurp(e.log);
  EXPECT_NE(output.find("8 runs (2 algorithms x 2 settings x 2 seeds)"), std::string::npos)
      << output;
  EXPECT_NE(output.find("straggler/asp seed 2 (8/8)"), std::string::npos) << output;
  // From the second run on, the start line estimates the time left at the pace so far.
  EXPECT_TRUE(std::regex_search(output, std::regex(R"(\(2/8\): .*; about [0-9]+ s left)")))
      << output;

  // Every run: its folder, deferred evaluations at every 10th clock in time order, its traffic.
  const std::string results = Slurp(e.run_dir + "/results.csv");
  EXPECT_EQ(Lines(results), 1 + 8) << results;
  for (const char* run : {"even/bsp/seed1", "straggler/asp/seed2"}) {
    const std::string dir = e.run_dir + "/" + run;
    EXPECT_NE(results.find(dir), std::string::npos) << results;
    EXPECT_NE(Slurp(dir + "/launch.log").find("evaluated 3 deferred model copies"),
              std::string::npos)
        << Slurp(dir + "/launch.log");
    const std::string flags = Slurp(dir + "/flags.txt");
    EXPECT_NE(flags.find("--eval_mode=deferred"), std::string::npos) << flags;
    EXPECT_NE(flags.find(std::string("--data_seed=") + run[std::strlen(run) - 1]),
              std::string::npos)
        << flags;
    std::istringstream metrics(Slurp(dir + "/metrics.csv"));
    std::string line;
    std::getline(metrics, line);
    std::vector<std::string> evaluated;
    double last = -1;
    while (std::getline(metrics, line)) {
      const double t = std::stod(line.substr(0, line.find(',')));
      EXPECT_GE(t, last) << "rows in time order";
      last = t;
      if (line.find(",,") == std::string::npos) evaluated.push_back(line);
    }
    ASSERT_EQ(evaluated.size(), 3u) << Slurp(dir + "/metrics.csv");
    EXPECT_NE(evaluated[0].find(",10,0,"), std::string::npos) << evaluated[0];
    EXPECT_NE(evaluated[2].find(",30,0,"), std::string::npos) << evaluated[2];
  }
  EXPECT_NE(
      Slurp(e.run_dir + "/straggler/bsp/seed1/launch.log").find("worker 1 computes 2x slower"),
      std::string::npos);
  EXPECT_EQ(Slurp(e.run_dir + "/even/bsp/seed1/launch.log").find("slower"), std::string::npos);

  // The report: a table per setting with a row per algorithm over both seeds, and its plots.
  const std::string report = Slurp(e.run_dir + "/report.md");
  EXPECT_NE(report.find("A small grid: two consistency models"), std::string::npos) << report;
  EXPECT_NE(report.find("## even"), std::string::npos);
  EXPECT_NE(report.find("## straggler"), std::string::npos);
  EXPECT_NE(report.find("| bsp | 2/2 |"), std::string::npos) << report;
  EXPECT_NE(report.find("| asp | 2/2 |"), std::string::npos) << report;
  for (const char* setting : {"even", "straggler"}) {
    const std::string png = Slurp(e.run_dir + "/plots/" + setting + ".png");
    ASSERT_GT(png.size(), 1000u) << setting;
    EXPECT_EQ(png.substr(1, 3), "PNG");
  }

  // Run again (the programs named by --bin_dir this time: where they are is not what they
  // run): every run is kept, the report written again.
  const std::string bin_dir = std::filesystem::path(Bin("hetps")).parent_path().string();
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir, "--bin_dir=" + bin_dir}, 60s), 0)
      << Slurp(e.log);
  EXPECT_NE(Slurp(e.log).find("even/bsp seed 1 (1/8): done before"), std::string::npos)
      << Slurp(e.log);

  // A run that did not finish (no "done") is the only one run again.
  std::filesystem::remove(e.run_dir + "/straggler/bsp/seed2/done");
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir}, 120s), 0) << Slurp(e.log);
  const std::string resumed = Slurp(e.log);
  EXPECT_NE(resumed.find("straggler/bsp seed 2 (7/8): 1 server, 2 workers"), std::string::npos)
      << resumed;
  EXPECT_EQ(resumed.find("(6/8): 1 server"), std::string::npos) << resumed;
  EXPECT_EQ(Lines(Slurp(e.run_dir + "/results.csv")), 1 + 8);

  // `report` writes the report from the folder alone.
  std::filesystem::remove(e.run_dir + "/report.md");
  ASSERT_EQ(e.Run({"report", e.run_dir}, 30s), 0) << Slurp(e.log);
  EXPECT_NE(Slurp(e.run_dir + "/report.md").find("| asp | 2/2 |"), std::string::npos);

  // Fewer seeds of the same experiment: the runs it has are kept, the report covers one seed.
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir, "--repeats=1"}, 60s), 0)
      << Slurp(e.log);
  EXPECT_NE(Slurp(e.log).find("straggler/asp seed 1 (4/4): done before"), std::string::npos)
      << Slurp(e.log);
  EXPECT_EQ(Lines(Slurp(e.run_dir + "/results.csv")), 1 + 4);

  // The same folder with other settings is refused, and nothing in it is touched.
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir, "--iterations=20"}, 30s), 2)
      << Slurp(e.log);
  EXPECT_NE(Slurp(e.log).find("holds an experiment with other settings"), std::string::npos)
      << Slurp(e.log);
  EXPECT_TRUE(std::filesystem::exists(e.run_dir + "/straggler/bsp/seed2/done"));
}

// --sweep_lr: every rate is tried on a validation split (never the test set), the best goes to
// the grid's runs, and the report says which and why.
TEST(ExperimentRunTest, ALearningRateSweepOnAValidationSplitChoosesTheGridsRate) {
  Experiment e;
  std::ofstream(e.file) << "--workload=train\n--hidden=32\n--optimizer=sgd:lr=0.05\n"
                           "--init=worker\n--iterations=30\n--eval_every=10\n--workers=2\n"
                           "--repeats=1\n--target=0.5\n--sweep_lr=0.0001,0.1\n"
                           "--sweep_iterations=20\n--validation=2000\n"
                           "--algorithm=asp: --consistency=asp\n";
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir}, 180s), 0) << Slurp(e.log);
  const std::string output = Slurp(e.log);
  EXPECT_NE(output.find("after a sweep of 2 rates: 2 runs"), std::string::npos) << output;
  EXPECT_NE(output.find("sweep chose lr 0.1 for default/asp"), std::string::npos)
      << "a rate 1000x smaller barely moves the model in 20 clocks\n"
      << output;
  for (const char* lr : {"0.0001", "0.1"}) {
    const std::string dir = e.run_dir + "/sweep/default/asp/lr" + lr + "/seed2";
    const std::string metrics = Slurp(dir + "/metrics.csv");
    EXPECT_EQ(metrics.rfind("wall_s,clock,worker,loss,validation_accuracy,staleness\n", 0), 0u)
        << metrics;
    EXPECT_NE(Slurp(dir + "/summary.json").find("\"eval_set\":\"validation\""), std::string::npos);
    const std::string launch = Slurp(dir + "/launch.log");
    EXPECT_NE(launch.find("final validation accuracy"), std::string::npos) << launch;
    EXPECT_NE(launch.find("trains on 29000 samples"), std::string::npos)
        << "each of 2 workers: half of 60000 less the 2000 held out\n"
        << launch;
    EXPECT_EQ(launch.find("test accuracy"), std::string::npos) << launch;
  }
  const std::string grid_flags = Slurp(e.run_dir + "/default/asp/seed1/flags.txt");
  EXPECT_NE(grid_flags.find("--optimizer=sgd:lr=0.1"), std::string::npos) << grid_flags;
  EXPECT_EQ(grid_flags.find("--validation"), std::string::npos) << grid_flags;
  EXPECT_NE(Slurp(e.run_dir + "/default/asp/seed1/launch.log").find("final test accuracy"),
            std::string::npos);
  const std::string sweep = Slurp(e.run_dir + "/sweep.csv");
  EXPECT_EQ(Lines(sweep), 3) << sweep;
  EXPECT_NE(sweep.find("default,asp,0.1,1,"), std::string::npos) << sweep;
  const std::string report = Slurp(e.run_dir + "/report.md");
  EXPECT_NE(report.find("## Learning rates"), std::string::npos) << report;
  EXPECT_NE(report.find("| default | asp | 0."), std::string::npos) << report;
  EXPECT_NE(report.find("**"), std::string::npos) << report;

  // Run again: the sweep's runs are kept too.
  ASSERT_EQ(e.Run({"run", e.file, "--run_dir=" + e.run_dir}, 60s), 0) << Slurp(e.log);
  EXPECT_NE(Slurp(e.log).find("sweep default/asp lr 0.0001 seed 2 (1/3): done before"),
            std::string::npos)
      << Slurp(e.log);
}

// SIGINT stops the experiment and the cluster of its run; nothing of it outlives it.
TEST(ExperimentRunTest, SigintStopsTheRunningCluster) {
  Experiment e;
  std::vector<std::string> argv = {Bin("hetps"), "experiment",          "run",
                                   e.file,       "--iterations=100000", "--run_dir=" + e.run_dir};
  SpawnOptions options;
  options.output_file = e.log;
  auto pid = Spawn(argv, options);
  ASSERT_TRUE(pid.ok());
  struct Reaper {  // a failed assertion must not leave the experiment training on
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);  // its launch dies with it, and the cluster with the launch
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{*pid};
  for (int i = 0; i < 600 && Slurp(e.log).find("iter ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(Slurp(e.log).find("iter "), std::string::npos) << Slurp(e.log);
  kill(*pid, SIGINT);
  int st = 0;
  pid_t ended = 0;
  for (int i = 0; i < 300 && (ended = waitpid(*pid, &st, WNOHANG)) == 0; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(ended, *pid) << "the experiment did not stop on SIGINT\n" << Slurp(e.log);
  reaper.pid = -1;
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 128 + SIGINT) << Slurp(e.log);
  int left = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string cmdline = Slurp((entry.path() / "cmdline").string());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(e.run_dir) != std::string::npos) ++left;
  }
  EXPECT_EQ(left, 0) << "a process of the run outlived the experiment";
}

}  // namespace
}  // namespace hetps::testing
