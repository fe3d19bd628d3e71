#include "cli/experiment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/experiment_report.h"
#include "cli/run_series.h"
#include "tests/scratch_dir.h"

namespace hetps {
namespace {

using ::hetps::testing::ScratchDir;

constexpr char kFile[] =
    "# Two consistency models under a straggler.\n"
    "# Second line of the description.\n"
    "--workload=train\n"
    "--iterations=100\n"
    "--workers=3\n"
    "--repeats=2\n"
    "--target=0.8\n"
    "--data_seed=7\n"
    "--algorithm=bsp: --consistency=bsp --optimizer=sgd:lr=0.4\n"
    "--algorithm=ssp3: --consistency=ssp:staleness=3\n"
    "--setting=even:\n"
    "--setting=slow: --straggler=persistent:factor=3\n";

constexpr char kSummaryOfTest[] = R"({"test_accuracy":0.8,"wall_s":2,"samples_per_s":5})";

struct Files {
  ScratchDir dir{"experiment_test"};
  Files() { std::filesystem::create_directories(dir.path()); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = (dir.path() / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST(ExperimentArgsTest, TheFileSetsOptionsArmsAndFlagsTheCommandLineAddsTo) {
  Files files;
  const std::string path = files.Write("stragglers.flags", kFile);
  auto a = ParseExperimentArgs({"run", path, "--repeats=3", "--iterations=50"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->name, "stragglers");
  EXPECT_EQ(a->about, "Two consistency models under a straggler.\nSecond line of the description.");
  EXPECT_EQ(a->workers, 3);
  EXPECT_EQ(a->servers, 1);
  EXPECT_EQ(a->repeats, 3) << "the command line's option replaces the file's";
  EXPECT_DOUBLE_EQ(a->target, 0.8);
  ASSERT_EQ(a->algorithms.size(), 2u);
  EXPECT_EQ(a->algorithms[0].name, "bsp");
  EXPECT_EQ(a->algorithms[0].flags,
            (std::vector<std::string>{"--consistency=bsp", "--optimizer=sgd:lr=0.4"}));
  ASSERT_EQ(a->settings.size(), 2u);
  EXPECT_TRUE(a->settings[0].flags.empty());
  EXPECT_EQ(a->flags, (std::vector<std::string>{"--workload=train", "--iterations=100",
                                                "--data_seed=7", "--iterations=50"}));
}

TEST(ExperimentArgsTest, BadFilesAndArmsAreRefusedBeforeAnythingRuns) {
  Files files;
  auto refused = [&](const std::string& text, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"run", files.Write("bad.flags", text)};
    args.insert(args.end(), extra.begin(), extra.end());
    auto a = ParseExperimentArgs(args);
    return a.ok() ? std::string() : a.status().message();
  };
  EXPECT_NE(refused("--workload=train\n").find("no --algorithm"), std::string::npos);
  EXPECT_NE(refused("--algorithm=--consistency=bsp\n").find("NAME:"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a b: --consistency=bsp\n").find("folder"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a: consistency=bsp\n").find("not a flag"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a:\n--algorithm=a: --consistency=asp\n").find("twice"),
            std::string::npos);
  EXPECT_NE(refused("--algorithm=a: --data_seed=3\n").find("per run"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a:\n--repeats=0\n").find("repeats"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a:\n--target=1.5\n").find("target"), std::string::npos);
  EXPECT_NE(refused("--algorithm=a:\n--data_seed=one\n").find("--data_seed"), std::string::npos)
      << "the seeds of the runs count up from it: no number must not become seed 0";
  EXPECT_NE(refused("--algorithm=a:\n", {"stray"}).find("not a flag"), std::string::npos);
  EXPECT_FALSE(ParseExperimentArgs({"run", files.Write("x.flags", "") + ".missing"}).ok());
  EXPECT_FALSE(ParseExperimentArgs({"walk", "x"}).ok());
  EXPECT_FALSE(ParseExperimentArgs({"report"}).ok());
  const std::string dir = files.dir.str();
  files.Write("experiment.flags", "--algorithm=a:\n");
  EXPECT_TRUE(ParseExperimentArgs({"report", dir, "--target=0.7"}).ok());
  EXPECT_FALSE(ParseExperimentArgs({"report", dir, "--iterations=5"}).ok())
      << "a report runs nothing: role flags mean nothing to it";
}

// Repeat by repeat, setting by setting, algorithm by algorithm; each run's flags in the order
// that lets its arms win, and its own seed.
TEST(ExperimentArgsTest, TheGridRunsRepeatByRepeatAndEachRunGetsItsSeed) {
  Files files;
  auto a = ParseExperimentArgs({"run", files.Write("g.flags", kFile)});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const auto grid = ExpandExperiment(*a, "/r");
  ASSERT_EQ(grid.size(), 8u);
  EXPECT_EQ(grid[0].dir, "/r/even/bsp/seed7");
  EXPECT_EQ(grid[1].dir, "/r/even/ssp3/seed7");
  EXPECT_EQ(grid[2].dir, "/r/slow/bsp/seed7");
  EXPECT_EQ(grid[4].dir, "/r/even/bsp/seed8");
  EXPECT_EQ(grid[7].repeat, 1);
  EXPECT_EQ(grid[7].seed, 8);
  EXPECT_EQ(grid[3].flags, (std::vector<std::string>{
                               "--eval_mode=deferred", "--workload=train", "--iterations=100",
                               "--data_seed=7", "--straggler=persistent:factor=3",
                               "--consistency=ssp:staleness=3", "--data_seed=7"}));
  // A file that asks for live evaluation keeps it.
  auto live = ParseExperimentArgs({"run", files.Write("l.flags", kFile), "--eval_mode=live"});
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(ExpandExperiment(*live, "/r")[0].flags.front(), "--workload=train");
}

// An arm may size the cluster of its runs; the flag goes to the launch, not to the roles.
TEST(ExperimentArgsTest, AnArmMaySetTheWorkersOfItsRuns) {
  Files files;
  auto a = ParseExperimentArgs(
      {"run", files.Write("w.flags",
                          "--workers=4\n--algorithm=asp: --consistency=asp\n"
                          "--setting=w8: --workers=8 --servers=2\n--setting=w4:\n")});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const auto grid = ExpandExperiment(*a, "/r");
  ASSERT_EQ(grid.size(), 6u);
  EXPECT_EQ(grid[0].workers, 8);
  EXPECT_EQ(grid[0].servers, 2);
  EXPECT_EQ(grid[1].workers, 4);
  EXPECT_EQ(grid[1].servers, 1);
  for (const std::string& f : grid[0].flags) EXPECT_EQ(f.find("--workers"), std::string::npos);
  EXPECT_FALSE(
      ParseExperimentArgs({"run", files.Write("z.flags", "--algorithm=a: --workers=0\n")}).ok());
}

// The resolved file says the same experiment again: parsed, it resolves to itself.
TEST(ExperimentArgsTest, TheResolvedFileIsTheSameExperiment) {
  Files files;
  auto a = ParseExperimentArgs({"run", files.Write("s.flags", kFile), "--workers=2"});
  ASSERT_TRUE(a.ok());
  const std::string resolved = ExperimentFlagFile(*a);
  auto again = ParseExperimentArgs({"run", files.Write("experiment.flags", resolved)});
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << resolved;
  EXPECT_EQ(again->name, "s");
  EXPECT_EQ(again->about, a->about);
  EXPECT_EQ(again->workers, 2);
  EXPECT_EQ(ExperimentFlagFile(*again), resolved);
  const auto g1 = ExpandExperiment(*a, "/r"), g2 = ExpandExperiment(*again, "/r");
  ASSERT_EQ(g1.size(), g2.size());
  for (size_t i = 0; i < g1.size(); ++i) {
    EXPECT_EQ(g1[i].flags, g2[i].flags);
    EXPECT_EQ(g1[i].dir, g2[i].dir);
  }
}

// --sweep_lr: a rate spec without its own lr gets one; other parameters are kept.
TEST(ExperimentSweepTest, TheRateGoesIntoTheOptimizerSpec) {
  EXPECT_EQ(SpecWithRate("sgd:lr=0.05", "0.1"), "sgd:lr=0.1");
  EXPECT_EQ(SpecWithRate("adam", "0.002"), "adam:lr=0.002");
  EXPECT_EQ(SpecWithRate("momentum:beta=0.9,lr=0.05,nesterov=1", "0.2"),
            "momentum:lr=0.2,beta=0.9,nesterov=1");
}

constexpr char kSweepFile[] =
    "--workload=train\n"
    "--iterations=100\n"
    "--repeats=2\n"
    "--data_seed=7\n"
    "--optimizer=sgd:lr=0.05\n"
    "--sweep_lr=0.02,0.1\n"
    "--sweep_iterations=40\n"
    "--validation=3000\n"
    "--algorithm=bsp: --consistency=bsp\n"
    "--algorithm=adam: --consistency=asp --optimizer=adam:lr=0.001\n"
    "--setting=even:\n";

// Every algorithm and setting is tried at every rate, on seeds after the grid's, with a
// validation split and the sweep's clocks; the grid's runs then get the chosen rate.
TEST(ExperimentSweepTest, TheSweepTriesEveryRateThenTheGridGetsTheChosenOne) {
  Files files;
  auto a = ParseExperimentArgs({"run", files.Write("s.flags", kSweepFile)});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->sweep_lr, (std::vector<std::string>{"0.02", "0.1"}));
  const auto sweep = ExpandSweep(*a, "/r");
  ASSERT_EQ(sweep.size(), 4u);  // 1 seed x 1 setting x 2 algorithms x 2 rates
  EXPECT_EQ(sweep[0].dir, "/r/sweep/even/bsp/lr0.02/seed9");
  EXPECT_EQ(sweep[3].dir, "/r/sweep/even/adam/lr0.1/seed9");
  EXPECT_EQ(sweep[3].lr, "0.1");
  const auto& f = sweep[3].flags;
  EXPECT_EQ(f.end() - std::find(f.begin(), f.end(), "--optimizer=adam:lr=0.1"), 3)
      << "after the arms: the rate, then the split and the sweep's clocks";
  EXPECT_EQ(f[f.size() - 2], "--validation=3000");
  EXPECT_EQ(f.back(), "--iterations=40");
  EXPECT_NE(std::find(f.begin(), f.end(), "--data_seed=9"), f.end());

  // bsp: 0.1 scores higher; adam: a tie goes to the rate listed first.
  const std::vector<RateTrial> trials = {{"even", "bsp", "0.02", 0.80},
                                         {"even", "bsp", "0.1", 0.84},
                                         {"even", "adam", "0.02", 0.82},
                                         {"even", "adam", "0.1", 0.82}};
  const ChosenRates rates = ChooseRates(*a, trials);
  EXPECT_EQ(rates, (ChosenRates{{"even/bsp", "0.1"}, {"even/adam", "0.02"}}));
  EXPECT_TRUE(ChooseRates(*a, {trials[0], trials[2], trials[3]}).count("even/bsp") == 0)
      << "no choice without a run at every rate";
  const auto grid = ExpandExperiment(*a, "/r", rates);
  ASSERT_EQ(grid.size(), 4u);
  EXPECT_EQ(grid[0].lr, "0.1");
  EXPECT_EQ(grid[0].flags.back(), "--optimizer=sgd:lr=0.1");
  EXPECT_EQ(grid[1].flags.back(), "--optimizer=adam:lr=0.02");
  for (const auto& run : grid) {
    for (const std::string& flag : run.flags)
      EXPECT_EQ(flag.find("--validation"), std::string::npos);
  }
  // The resolved file keeps the sweep, so a resumed experiment sweeps the same way.
  auto again =
      ParseExperimentArgs({"run", files.Write("experiment.flags", ExperimentFlagFile(*a))});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ExperimentFlagFile(*again), ExperimentFlagFile(*a));
  EXPECT_EQ(ExpandSweep(*again, "/r")[3].flags, sweep[3].flags);
}

TEST(ExperimentSweepTest, BadSweepsAreRefused) {
  Files files;
  for (const char* bad : {"--sweep_lr=0.1", "--sweep_lr=0.1,x", "--sweep_lr=0.1,-1",
                          "--sweep_lr=0.1,0.1", "--sweep_repeats=0", "--validation=0"}) {
    EXPECT_FALSE(ParseExperimentArgs({"run", files.Write("b.flags", kSweepFile), bad}).ok()) << bad;
  }
  // A sweep needs an optimizer spec to put its rate into.
  auto none = ParseExperimentArgs(
      {"run", files.Write("n.flags", "--sweep_lr=0.1,0.2\n--algorithm=a: --consistency=asp\n")});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--optimizer"), std::string::npos);
  EXPECT_FALSE(
      ParseExperimentArgs({"run", files.Write("v.flags", std::string(kSweepFile) +
                                                             "--setting=v: --validation=9\n")})
          .ok())
      << "the sweep sets --validation";
  for (const char* alone : {"--validation=100", "--sweep_iterations=10", "--sweep_repeats=2"}) {
    auto without = ParseExperimentArgs({"run", files.Write("w.flags", kFile), alone});
    ASSERT_FALSE(without.ok()) << alone;
    EXPECT_NE(without.status().message().find("--sweep_lr"), std::string::npos);
  }
}

// A sweep run's score: the mean of its evaluations in the last quarter of its clocks.
TEST(ExperimentSweepTest, AScoreIsTheMeanOfTheLastQuarter) {
  TrainOutcome o;
  o.curve = {{1, 0, 0.1}, {2, 40, 0.5}, {3, 75, 0.8}, {4, 90, 0.84}, {5, 100, 0.86}};
  EXPECT_DOUBLE_EQ(SweepScore(o), (0.8 + 0.84 + 0.86) / 3);
  TrainOutcome empty;
  empty.final_accuracy = 0.7;
  EXPECT_DOUBLE_EQ(SweepScore(empty), 0.7);
}

// A validation run's files: the accuracy's column and key name the set.
TEST(ExperimentReportTest, AValidationRunIsReadAsOne) {
  auto o = ParseTrainOutcome(
      "wall_s,clock,worker,loss,validation_accuracy,staleness\n1.0,10,0,1.0,0.7,0\n",
      R"({"validation_accuracy":0.75,"eval_set":"validation","wall_s":2,"samples_per_s":5})", 0.6);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->eval_set, "validation");
  EXPECT_DOUBLE_EQ(o->final_accuracy, 0.75);
  ASSERT_EQ(o->curve.size(), 1u);
  EXPECT_FALSE(ParseTrainOutcome(
                   "wall_s,clock,worker,loss,validation_accuracy,staleness\n1.0,10,0,1.0,0.7,0\n",
                   kSummaryOfTest, 0.6)
                   .ok())
      << "the two files disagree on the set";
}

constexpr char kMetrics[] =
    "wall_s,clock,worker,loss,test_accuracy,staleness\n"
    "0.000,0,1,2.30000,,0\n"
    "1.000,10,0,1.00000,0.6000,1\n"
    "1.500,10,1,1.00000,,1\n"
    "2.000,20,0,0.80000,0.8100,2\n"
    "3.000,30,0,0.70000,0.7900,2\n";
constexpr char kSummary[] =
    R"({"test_accuracy":0.8200,"wall_s":3.10,"iterations":30,"workers":2,"samples_per_s":1234.5,)"
    R"("consistency":"ssp:staleness=3","traffic_workers":2,"partition_pushes":120,)"
    R"("bytes_pushed":4000000,"bytes_pulled":5000000,"dropped_pushes":3,)"
    R"("mean_push_staleness":1.2500,"max_push_staleness":4})";

TEST(ExperimentReportTest, AnOutcomeIsReadFromTheRunFolderFiles) {
  auto o = ParseTrainOutcome(kMetrics, kSummary, 0.8);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->curve.size(), 3u) << "rank 0's evaluations only";
  ASSERT_TRUE(o->at_target.has_value());
  EXPECT_DOUBLE_EQ(o->at_target->wall_s, 2.0);
  EXPECT_EQ(o->at_target->clock, 20);
  EXPECT_DOUBLE_EQ(o->best_accuracy(), 0.81);
  EXPECT_DOUBLE_EQ(o->final_accuracy, 0.82);
  EXPECT_DOUBLE_EQ(o->samples_per_s, 1234.5);
  EXPECT_EQ(o->partition_pushes, 120);
  EXPECT_EQ(o->bytes_pushed, 4000000);
  EXPECT_EQ(o->dropped_pushes, 3);
  EXPECT_DOUBLE_EQ(o->mean_push_staleness, 1.25);
  auto high = ParseTrainOutcome(kMetrics, kSummary, 0.9);
  ASSERT_TRUE(high.ok());
  EXPECT_FALSE(high->at_target.has_value());
}

TEST(ExperimentReportTest, MalformedRunFilesAreErrors) {
  EXPECT_FALSE(ParseTrainOutcome("", kSummary, 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome("wall_s,clock\n1,2\n", kSummary, 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome("wall_s,clock,test_accuracy\n1,2\n", kSummary, 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome("wall_s,clock,test_accuracy\nx,2,0.5\n", kSummary, 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome(kMetrics, "{not json", 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome(kMetrics, R"({"test_accuracy":"high"})", 0.8).ok());
  EXPECT_FALSE(ParseTrainOutcome(kMetrics, "[]", 0.8).ok());
}

// Two runs by hand: (1 s, 0.5), (3 s, 0.7) and (1 s, 0.6), (2 s, 0.8); four points on [0, 3].
TEST(ExperimentReportTest, TheBandIsTheMeanOverRunsWithItsConfidenceInterval) {
  TrainOutcome a, b;
  a.curve = {{1, 10, 0.5}, {3, 30, 0.7}};
  b.curve = {{1, 10, 0.6}, {2, 20, 0.8}};
  const auto band = AccuracyBand({&a, &b}, /*by_clock=*/false, 4);
  ASSERT_EQ(band.size(), 3u) << "no run has a value at 0 s";
  EXPECT_DOUBLE_EQ(band[0].x, 1);
  EXPECT_NEAR(band[0].mean, 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(band[1].x, 2);
  EXPECT_NEAR(band[1].mean, 0.7, 1e-12);  // a interpolated to 0.6, b at 0.8
  // sd of {0.6, 0.8} is 0.1 * sqrt(2); over sqrt(2) runs: 0.1; t(1) = 12.706.
  EXPECT_NEAR(band[1].ci95, 1.2706, 1e-9);
  EXPECT_NEAR(band[2].mean, 0.75, 1e-12) << "b holds its last value after its end";
  EXPECT_EQ(band[2].n, 2u);
  const auto by_clock = AccuracyBand({&a, &b}, /*by_clock=*/true, 4);
  ASSERT_EQ(by_clock.size(), 3u);
  EXPECT_DOUBLE_EQ(by_clock[1].x, 20);
  EXPECT_NEAR(by_clock[1].mean, 0.7, 1e-12);
  EXPECT_TRUE(AccuracyBand({}, false, 4).empty());
}

TEST(ExperimentReportTest, TheReportHasEveryRunTheTablesAndAPlotPerSetting) {
  Files files;
  const std::string dir = files.dir.str();
  std::vector<TrainOutcome> runs;
  for (int r = 0; r < 2; ++r) {
    auto o = ParseTrainOutcome(kMetrics, kSummary, 0.8);
    ASSERT_TRUE(o.ok());
    o->setting = "even";
    o->algorithm = "bsp";
    o->repeat = r;
    o->seed = 7 + r;
    o->dir = dir + "/even/bsp/seed" + std::to_string(7 + r);
    runs.push_back(*o);
  }
  ExperimentReportInfo info;
  info.name = "t";
  info.about = "About it.";
  info.how = "How it ran.";
  info.target = 0.8;
  info.settings = {"even", "slow"};
  info.algorithms = {"bsp", "asp"};
  info.repeats = 2;
  ASSERT_TRUE(WriteExperimentReport(dir, runs, info).ok());
  const std::string csv = Slurp(dir + "/results.csv");
  EXPECT_NE(csv.find("even,bsp,1,7,2.000,20,0.8200,0.8100,3.10,1234.5,120,4000000,5000000,3,"
                     "1.2500,"),
            std::string::npos)
      << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  const std::string md = Slurp(dir + "/report.md");
  EXPECT_NE(md.find("About it."), std::string::npos);
  // Identical runs: the interval is 0; the cell says it.
  EXPECT_NE(md.find("| bsp | 2/2 | 2/2 | 2.0 ± 0.0 | 20 ± 0 | 0.8200 ± 0.0000 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| asp | 0/2 | 0/0 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("## slow"), std::string::npos);
  const std::string gp = Slurp(dir + "/plots/even.gp");
  EXPECT_NE(gp.find("$time0 << EOD\n1.010 0.6021 0.6021 0.6021\n"), std::string::npos)
      << "the first point with a value: 3 s x 67 / 199\n"
      << gp;
  EXPECT_EQ(gp.find("$clocks1"), std::string::npos) << "asp has no runs: not drawn";
  EXPECT_NE(Slurp(dir + "/plots/slow.gp").find("set yrange [0:1]"), std::string::npos);
  EXPECT_NE(gp.find("filledcurves"), std::string::npos);
  EXPECT_NE(gp.find("set xlabel 'wall time (s)'"), std::string::npos) << gp;
  EXPECT_TRUE(std::filesystem::exists(dir + "/plots/slow.gp"));
  // Runs in virtual time (summary.json "clock": "virtual") are plotted against it.
  auto virtual_run =
      ParseTrainOutcome(kMetrics, std::string(kSummary).insert(1, "\"clock\":\"virtual\","), 0.8);
  ASSERT_TRUE(virtual_run.ok()) << virtual_run.status().ToString();
  EXPECT_TRUE(virtual_run->virtual_time);
  for (TrainOutcome& r : runs) r.virtual_time = true;
  ASSERT_TRUE(WriteExperimentReport(dir, runs, info).ok());
  EXPECT_NE(Slurp(dir + "/plots/even.gp").find("set xlabel 'virtual time (s)'"), std::string::npos);
}

}  // namespace
}  // namespace hetps
