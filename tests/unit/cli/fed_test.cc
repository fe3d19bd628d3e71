#include "cli/fed.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/fed_report.h"
#include "cli/run_series.h"
#include "cli/usage.h"

namespace hetps {
namespace {

// A scenario file of this process's own (ctest runs the tests of this binary side by side).
std::string Scenario(const std::string& text) {
  static int n = 0;
  const std::string path = ::testing::TempDir() + "/fed_test" + std::to_string(getpid()) + "_" +
                           std::to_string(++n) + ".flags";
  std::ofstream(path) << text;
  return path;
}

bool Has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

// The run folders' files (markers, flags, tables) are written through WriteText: a write that
// fails says which file and why, instead of leaving a run folder silently incomplete.
TEST(RunSeriesTest, WriteTextReportsWhatItCouldNotWrite) {
  const std::string path = ::testing::TempDir() + "/fed_test_write" + std::to_string(getpid());
  ASSERT_TRUE(WriteText(path, "one\n").ok());
  ASSERT_TRUE(WriteText(path, "two\n").ok());
  EXPECT_EQ(Slurp(path), "two\n") << "replaced, not appended";
  std::filesystem::remove(path);
  Status missing = WriteText("/nonexistent-hetps-dir/flags", "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent-hetps-dir/flags"), std::string::npos);
  if (std::filesystem::exists("/dev/full")) {  // opens, but every write fails (ENOSPC)
    EXPECT_FALSE(WriteText("/dev/full", std::string(1 << 16, 'x')).ok());
  }
}

// `hetps fed --help` names every preset from the presets themselves, not from a copy.
TEST(FedUsageTest, NamesEveryPreset) {
  const CommandUsage* fed = FindCommand("fed");
  ASSERT_NE(fed, nullptr);
  const std::string text = fed->text;
  EXPECT_EQ(text.find("{presets}"), std::string::npos);
  ASSERT_FALSE(FedPresetNames().empty());
  for (const std::string& name : FedPresetNames()) {
    EXPECT_TRUE(text.find(" " + name + ",") != std::string::npos ||
                text.find(" " + name + ".") != std::string::npos)
        << name << " is missing from\n"
        << text;
  }
}

TEST(FedArgsTest, ANumberThatIsNoNumberIsRefusedNamingItsFlag) {
  const std::string path = Scenario("--workload=edge\n");
  for (const char* bad : {"--evaluators=two", "--evaluators=-1", "--evaluators=1x"}) {
    auto a = ParseFedArgs({"run", "--flagfile=" + path, bad});
    ASSERT_FALSE(a.ok()) << bad << " was accepted";
    EXPECT_NE(a.status().message().find("--evaluators"), std::string::npos) << a.status().message();
  }
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + Scenario("--evaluators=two\n")}).ok());
  EXPECT_TRUE(ParseFedArgs({"run", "--flagfile=" + path, "--evaluators=2"}).ok());
  // A repeat's seed is the given one plus the repeat: a seed that is no number never becomes 0.
  for (const char* bad : {"--selection_seed=two", "--selection_seed=-3"}) {
    auto a = ParseFedArgs({"run", "--flagfile=" + path, "--repeats=2", bad});
    ASSERT_FALSE(a.ok()) << bad << " was accepted";
    EXPECT_NE(a.status().message().find("--selection_seed"), std::string::npos)
        << a.status().message();
  }
}

TEST(FedArgsTest, TheScenarioSetsOptionsTheCommandLineOverrides) {
  const std::string path =
      Scenario("# a scenario\n--workload=edge\n--clients=100\n--parallel=10\n--target=0.7\n");
  auto a = ParseFedArgs({"compare", "--flagfile=" + path, "--algorithms=fedavg,fedbuff",
                         "--parallel", "12", "--local_lr=0.1"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->compare);
  EXPECT_EQ(a->clients, 100);
  EXPECT_EQ(a->parallel, 12) << "the command line wins";
  EXPECT_DOUBLE_EQ(a->target, 0.7);
  EXPECT_EQ(a->algorithms, (std::vector<std::string>{"fedavg", "fedbuff"}));
  EXPECT_EQ(a->scenario_flags, std::vector<std::string>{"--workload=edge"})
      << "hetps fed's own options are not passed to the roles";
  EXPECT_EQ(a->role_flags, std::vector<std::string>{"--local_lr=0.1"});
  EXPECT_EQ(a->repeats, 1);
  auto r = ParseFedArgs({"compare", "--flagfile=" + path, "--repeats=3"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repeats, 3);
  EXPECT_FALSE(ParseFedArgs({"compare", "--flagfile=" + path, "--repeats=0"}).ok());
}

TEST(FedArgsTest, AScenarioMayIncludeAnother) {
  const std::string base = Scenario("--workload=edge\n--clients=20\n--fail_fraction=0\n");
  const std::string name = std::filesystem::path(base).filename().string();
  const std::string path =
      Scenario("--flagfile=" + name + "\n--fail_fraction=0.3\n--algorithms=fedavg,fedlesscan\n");
  auto a = ParseFedArgs({"compare", "--flagfile=" + path});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->clients, 20);
  EXPECT_EQ(a->scenario_flags, (std::vector<std::string>{"--workload=edge", "--fail_fraction=0",
                                                         "--fail_fraction=0.3"}));
  EXPECT_EQ(a->algorithms, (std::vector<std::string>{"fedavg", "fedlesscan"}));
  const std::string name_loop = "fed_test_loop" + std::to_string(getpid()) + ".flags";
  const std::string loop = ::testing::TempDir() + "/" + name_loop;
  std::ofstream(loop) << "--flagfile=" << name_loop << "\n";
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + loop}).ok());
}

TEST(FedArgsTest, BadArgumentsAreRefusedBeforeAnythingRuns) {
  const std::string path = Scenario("--workload=edge\n");
  EXPECT_FALSE(ParseFedArgs({}).ok());
  EXPECT_FALSE(ParseFedArgs({"launch", "--flagfile=" + path}).ok());
  EXPECT_FALSE(ParseFedArgs({"run"}).ok()) << "no scenario";
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=/nonexistent.flags"}).ok());
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--algorithms=fedavg,fedbuff"}).ok())
      << "run takes one algorithm";
  EXPECT_FALSE(ParseFedArgs({"compare", "--flagfile=" + path, "--algorithms=nonesuch"}).ok());
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--target=2"}).ok());
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--clients=0"}).ok());
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--per_round=8", "--parallel=4"}).ok())
      << "an aggregation cannot wait for more uploads than clients train at once";
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + Scenario("--clients=x\n")}).ok());
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--clients_per_process=4"}).ok())
      << "a pool hosts clients of a --client_cmd program";
  EXPECT_TRUE(
      ParseFedArgs({"run", "--flagfile=" + path, "--clock=virtual", "--client_cmd=python3 c.py"})
          .ok())
      << "Python clients run in virtual time too";
  auto defaults = ParseFedArgs({"run", "--flagfile=" + path});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->algorithms, std::vector<std::string>{"fedavg"});
  EXPECT_TRUE(defaults->client_cmd.empty()) << "the C++ edge client by default";
}

TEST(FedArgsTest, AClientCommandRunsEveryClientAndMayPoolThem) {
  const std::string path = Scenario("--workload=edge\n--clients_per_process=10\n");
  auto a = ParseFedArgs({"run", "--flagfile=" + path, "--client_cmd=python3 my_client.py"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->client_cmd, "python3 my_client.py");
  EXPECT_EQ(a->clients_per_process, 10);
  EXPECT_EQ(a->scenario_flags, std::vector<std::string>{"--workload=edge"});
  EXPECT_TRUE(a->role_flags.empty()) << "hetps fed's own options, not the roles'";
}

// Every algorithm of a comparison gets the same budget of applied uploads: an algorithm that
// aggregates K uploads at a time runs uploads / K aggregations.
TEST(FedArgsTest, PresetsShareTheBudgetOfUploads) {
  FedArgs a{.parallel = 7, .per_round = 5, .uploads = 200, .eval_uploads = 20};
  auto fedavg = FedAlgorithmFlags("fedavg", a);
  ASSERT_TRUE(fedavg.ok());
  EXPECT_TRUE(Has(*fedavg, "--consistency=selected"));
  EXPECT_TRUE(Has(*fedavg, "--clients_per_round=5"));
  EXPECT_TRUE(Has(*fedavg, "--overcommit=1.4")) << "7 selected, the first 5 kept";
  EXPECT_TRUE(Has(*fedavg, "--rounds=40"));
  EXPECT_TRUE(Has(*fedavg, "--eval_every=4"));
  auto fedasync = FedAlgorithmFlags("fedasync", a);
  ASSERT_TRUE(fedasync.ok());
  EXPECT_TRUE(Has(*fedasync, "--concurrency=7"));
  EXPECT_TRUE(Has(*fedasync, "--rounds=200"));
  EXPECT_TRUE(Has(*fedasync, "--eval_every=20"));
  auto fedbuff = FedAlgorithmFlags("fedbuff", a);
  ASSERT_TRUE(fedbuff.ok());
  EXPECT_TRUE(Has(*fedbuff, "--aggregator=fedbuff:k=5"));
  EXPECT_TRUE(Has(*fedbuff, "--rounds=200")) << "every commit is handed to the aggregator";
  auto fedsa = FedAlgorithmFlags("fedsa", a);
  ASSERT_TRUE(fedsa.ok());
  EXPECT_TRUE(Has(*fedsa, "--quorum=5"));
  EXPECT_TRUE(Has(*fedsa, "--rounds=40"));
  a.scenario_flags = {"--model=cnn"};
  auto temporal = FedAlgorithmFlags("temporal", a);
  ASSERT_TRUE(temporal.ok());
  EXPECT_TRUE(Has(*temporal, "--aggregator=temporal"));
  EXPECT_TRUE(Has(*temporal, "--deep_from=2")) << "the CNN's dense layers are the deep part";
  for (const std::string& name : FedPresetNames()) {
    EXPECT_TRUE(FedAlgorithmFlags(name, a).ok()) << name;
  }
  // A robust rule's preset: FedAvg's rounds with its aggregator, parameters after the name.
  auto krum = FedAlgorithmFlags("krum:f=2", a);
  ASSERT_TRUE(krum.ok()) << krum.status().ToString();
  EXPECT_TRUE(Has(*krum, "--aggregator=krum:f=2"));
  EXPECT_TRUE(Has(*krum, "--consistency=selected"));
  EXPECT_TRUE(Has(*krum, "--rounds=40"));
  // --dp=central: FedAvg's rounds get DP-FedAvg's noisy aggregator; others refuse it.
  a.role_flags = {"--dp=central:clip=0.5,noise=1.1"};
  auto dp = FedAlgorithmFlags("fedavg", a);
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_TRUE(Has(*dp, "--aggregator=dp_fedavg:clip=0.5,noise=1.1"));
  EXPECT_FALSE(Has(*dp, "--aggregator=fedavg"));
  EXPECT_NE(FedAlgorithmFlags("fedbuff", a).status().message().find("--dp=local"),
            std::string::npos);
  a.role_flags = {"--dp=local:clip=0.5,noise=1.1"};
  EXPECT_TRUE(FedAlgorithmFlags("fedbuff", a).ok()) << "local noise works with any algorithm";
  a.role_flags.clear();
  auto refused = FedAlgorithmFlags("fedsa:k=3", a);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("takes no parameters"), std::string::npos);
}

TEST(FedArgsTest, AnItemMayAddFlagsOrComeFromAFile) {
  const std::string path = Scenario("--workload=edge\n");
  const std::string algorithm = ::testing::TempDir() + "/mine.flags";
  std::ofstream(algorithm) << "--consistency=selected\n--aggregator=fedavg\n";
  auto a = ParseFedArgs({"compare", "--flagfile=" + path,
                         "--algorithm=aafl+--ratio=fixed:alpha=0.3", "--algorithm=" + algorithm});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->algorithms, (std::vector<std::string>{"aafl+--ratio=fixed:alpha=0.3", algorithm}));
  EXPECT_FALSE(ParseFedArgs({"run", "--flagfile=" + path, "--algorithm=/nonexistent.flags"}).ok());
}

constexpr char kHeader[] =
    "aggregation,wall_s,kept,dropped,staleness_mean,staleness_max,bytes_up,bytes_down,test_loss,"
    "test_accuracy,kept_ranks,dropped_ranks\n";

// A late upload (the rounds log's late column) was dropped from its own round first and kept
// by a later one: the effective update ratio counts it once.
TEST(FedReportTest, ALateUploadCountsOnceInTheEffectiveUpdateRatio) {
  const std::string csv = std::string(kHeader).substr(0, std::strlen(kHeader) - 1) +
                          ",late\n"
                          "1,1.0,2,1,0.00,0,300,300,,,1 2,3,0\n"
                          "2,2.0,3,0,0.33,1,500,600,0.9,0.61,1 2 3,,1\n";
  auto o = ParseFedOutcome(csv, 0.8);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->late, 1);
  EXPECT_DOUBLE_EQ(o->effective_update_ratio(), 5.0 / 5.0) << "5 uploads asked, 5 used";
}

TEST(FedReportTest, AnOutcomeIsReadFromTheRoundsLog) {
  const std::string csv = std::string(kHeader) +
                          "1,1.0,2,1,0.00,0,300,300,,,1 2,3\n"
                          "2,2.0,2,0,1.00,1,500,600,0.9,0.61,2 3,\n"
                          "3,3.5,2,1,0.50,1,800,900,,,1 3,2\n"
                          "4,4.0,2,0,0.00,0,1000,1200,0.5,0.83,1 2,\n"
                          "5,5.0,2,0,0.00,0,1200,1500,0.4,0.81,1 2,\n";
  auto o = ParseFedOutcome(csv, 0.8);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->aggregations, 5);
  EXPECT_DOUBLE_EQ(o->wall_s, 5.0);
  EXPECT_EQ(o->kept, 10);
  EXPECT_EQ(o->dropped, 2);
  EXPECT_DOUBLE_EQ(o->effective_update_ratio(), 10.0 / 12);
  EXPECT_DOUBLE_EQ(o->mean_staleness, (2 * 1.0 + 2 * 0.5) / 10);
  EXPECT_EQ(o->bytes_up, 1200);
  EXPECT_EQ(o->bytes_down, 1500);
  ASSERT_EQ(o->curve.size(), 3u);
  ASSERT_TRUE(o->at_target.has_value());
  EXPECT_EQ(o->at_target->aggregation, 4) << "the first measurement at or above the target";
  EXPECT_DOUBLE_EQ(o->at_target->wall_s, 4.0);
  EXPECT_EQ(o->at_target->bytes_up, 1000);
  EXPECT_DOUBLE_EQ(*o->final_accuracy(), 0.81);

  auto missed = ParseFedOutcome(csv, 0.9);
  ASSERT_TRUE(missed.ok());
  EXPECT_FALSE(missed->at_target.has_value());
  missed->name = "fedavg";
  const auto summary = nlohmann::json::parse(FedSummaryJson({*missed}, 0.9));
  EXPECT_TRUE(summary["runs"][0]["time_to_target_s"].is_null());
  EXPECT_DOUBLE_EQ(summary["runs"][0]["final_accuracy"].get<double>(), 0.81);
  const std::string md = FedReportMarkdown({*missed}, 0.9, "how");
  EXPECT_NE(md.find("| fedavg | not reached | - | - | 0.8100 | 0.8300 | 5 | 5.0 |"),
            std::string::npos)
      << md;
}

TEST(FedReportTest, MeansCarryTheirConfidenceIntervals) {
  const MeanCi none = MeanAndCi({});
  EXPECT_EQ(none.n, 0u);
  const MeanCi one = MeanAndCi({4});
  EXPECT_DOUBLE_EQ(one.mean, 4);
  EXPECT_DOUBLE_EQ(one.ci95, 0);
  const MeanCi three = MeanAndCi({1, 2, 3});  // sd 1: t(2) x 1 / sqrt(3)
  EXPECT_DOUBLE_EQ(three.mean, 2);
  EXPECT_NEAR(three.ci95, 4.303 / std::sqrt(3.0), 1e-9);
}

// With repeats, the report leads with each algorithm's means over its runs; time and bytes to
// the target count the runs that reached it.
TEST(FedReportTest, RepeatsAreSummarisedPerAlgorithm) {
  auto run = [](const std::string& name, int repeat, std::optional<double> reached_at) {
    FedOutcome o{.name = name, .repeat = repeat, .aggregations = 10, .wall_s = 20};
    o.curve = {{10, 20, 3000000, reached_at ? 0.9 : 0.5}};
    if (reached_at) o.at_target = FedOutcome::Point{5, *reached_at, 1000000, 0.85};
    return o;
  };
  const std::vector<FedOutcome> runs = {run("fedavg", 0, 10.0), run("fedavg", 1, 12.0),
                                        run("fedavg", 2, std::nullopt), run("fedbuff", 0, 8.0),
                                        run("fedbuff", 1, 9.0)};
  const std::string md = FedReportMarkdown(runs, 0.8, "how");
  EXPECT_NE(md.find("| fedavg | 2/3 | 11.0 ± 12.7 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fedbuff | 2/2 | 8.5 ± 6.4 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fedavg #3 | not reached |"), std::string::npos) << md;
  const auto summary = nlohmann::json::parse(FedSummaryJson(runs, 0.8));
  ASSERT_EQ(summary["algorithms"].size(), 2u);
  EXPECT_EQ(summary["algorithms"][0]["reached"], 2);
  EXPECT_DOUBLE_EQ(summary["algorithms"][0]["time_to_target_s"]["mean"].get<double>(), 11.0);
  EXPECT_EQ(summary["runs"][2]["repeat"], 2);
  const std::string gp = FedPlotScript(runs, 0.8, "x.png");
  EXPECT_NE(gp.find("$run1 using 1:3 with linespoints lc 1 pt 7 ps 0.5 notitle"), std::string::npos)
      << "one colour and one title per algorithm\n"
      << gp;
  EXPECT_NE(gp.find("$run3 using 1:3 with linespoints lc 2 pt 7 ps 0.5 title 'fedbuff'"),
            std::string::npos);
}

TEST(FedReportTest, AMalformedRoundsLogIsAnError) {
  EXPECT_FALSE(ParseFedOutcome("", 0.8).ok());
  EXPECT_FALSE(ParseFedOutcome("round,opened_s\n0,1\n", 0.8).ok()) << "missing columns";
  EXPECT_FALSE(ParseFedOutcome(std::string(kHeader) + "1,x,2,1,0,0,3,3,,,1,\n", 0.8).ok());
  EXPECT_FALSE(ParseFedOutcome(std::string(kHeader) + "1,1.0,2\n", 0.8).ok()) << "short row";
}

TEST(FedReportTest, ThePlotScriptCarriesEveryRunsCurve) {
  FedOutcome a{.name = "fedavg"}, b{.name = "fed_buff"};
  a.curve = {{1, 1.5, 2000000, 0.5}, {2, 3.0, 4000000, 0.7}};
  b.curve = {{4, 2.0, 1000000, 0.6}};
  const std::string gp = FedPlotScript({a, b}, 0.8, "/tmp/x.png");
  EXPECT_NE(gp.find("$run0 << EOD\n1.500 2.0000 0.5000\n3.000 4.0000 0.7000\nEOD\n"),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("$run1 << EOD\n2.000 1.0000 0.6000\nEOD\n"), std::string::npos);
  EXPECT_NE(gp.find("title 'fed buff'"), std::string::npos) << "no '_' subscripts in titles";
  EXPECT_NE(gp.find("set output '/tmp/x.png'"), std::string::npos);
}

}  // namespace
}  // namespace hetps
