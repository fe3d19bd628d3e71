// Data-centre training in virtual time (hetps launch --clock=virtual, docs/virtual-time.md):
// real workers, servers and consistency controllers, but each step's compute takes its device
// model's virtual time and the scheduler grants the workers' turns (their pulls; their pushes
// and clock) in virtual-time order. So a run's outcome (the metrics against virtual time, the
// staleness of every push, the final model's accuracy) depends only on its scenario and seeds,
// also when servers park reads and clocks for slower workers (ssp, bsp) and with two CPU-bound
// processes competing for this machine's cores; and under asp the staleness of the pushes is
// exactly the one the modelled speeds give.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <regex>

#include "tests/integration/fed_bench.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// `hetps launch` of a small MLP in virtual time on a learnable image set.
struct TrainBench {
  ScratchDir dir{"virtual_train_test"};
  std::string flags;
  TrainBench() {
    std::filesystem::create_directories(dir.path());
    const std::string images = Path("train-images.gz"), labels = Path("train-labels.gz");
    WriteData(images, labels, 600, 21);
    flags = fmt::format(
        "--workload=train --model=mlp --hidden=16 --train_images={0} --train_labels={1} "
        "--test_images={0} --test_labels={1} --data_cache={2} --batch=16 --eval_every=20 "
        "--optimizer=sgd:lr=0.1 --init=worker --clock=virtual "
        "--device_gflops=0.001 --seed=4",
        images, labels, Path("cache"));
  }
  std::string Path(const std::string& name) const { return (dir.path() / name).string(); }

  // Runs the launch into <dir>/<name>; returns its output (the test fails on a non-zero exit).
  std::string Run(const std::string& name, const std::string& args) const {
    const std::string run = Path(name), log = Path(name + ".log");
    SpawnOptions options;
    options.output_file = log;
    options.truncate = true;
    std::vector<std::string> argv = {Bin("hetps"), "launch", "--run_dir=" + run};
    std::istringstream in(flags + " " + args);
    for (std::string a; in >> a;) argv.push_back(a);
    auto pid = Spawn(argv, options);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    const int code = pid.ok() ? WaitCode(*pid, 240s) : -1;
    if (code == -1 && pid.ok()) kill(*pid, SIGKILL);
    EXPECT_EQ(code, 0) << Slurp(log);
    return Slurp(log);
  }
};

nlohmann::json Summary(const std::string& run) {
  return nlohmann::json::parse(Slurp(run + "/summary.json"), nullptr, false);
}

// The outcome of a run: its metrics (every worker's rows, stamped in virtual time) and the
// summary's figures that do not measure the host.
std::string Outcome(const std::string& run) {
  nlohmann::json s = Summary(run);
  for (const char* host : {"host_s", "samples_per_s", "step_s"}) s.erase(host);
  return Slurp(run + "/metrics.csv") + s.dump();
}

TEST(VirtualTrainTest, ParkedReadsAndClocksKeepARunDependentOnlyOnItsSeeds) {
  TrainBench bench;
  for (const std::string consistency : {"ssp:staleness=1", "bsp"}) {
    SCOPED_TRACE(consistency);
    const std::string args =
        "--workers=3 --servers=2 --iterations=60 --slow_worker=1:3 "
        "--straggler=transient:every=10,length=3,factor=4 --consistency=" +
        consistency;
    const std::string name = consistency.substr(0, 3);
    const std::string plain = bench.Run(name + "-plain", args);
    EXPECT_NE(plain.find("runs in virtual time"), std::string::npos) << plain;
    std::string loaded;
    {
      CpuHogs hogs;
      loaded = bench.Run(name + "-loaded", args);
    }
    const std::string a = bench.Path(name + "-plain"), b = bench.Path(name + "-loaded");
    const nlohmann::json s = Summary(a);
    ASSERT_TRUE(s.is_object()) << Slurp(a + "/summary.json");
    EXPECT_EQ(s.value("clock", ""), "virtual");
    EXPECT_GT(s.value("test_accuracy", 0.0), 0.3) << plain;
    EXPECT_EQ(Outcome(a), Outcome(b)) << "the CPU hogs changed the run";
    const std::string metrics = Slurp(a + "/metrics.csv");
    EXPECT_GT(std::count(metrics.begin(), metrics.end(), '\n'), 15) << metrics;
  }
}

// Each worker's step time from its log line "rank R runs in virtual time: a step computes X".
std::map<int, double> StepSeconds(const std::string& log) {
  std::map<int, double> out;
  static const std::regex line(
      R"(rank (\d+) runs in virtual time: a step computes (\S+) virtual s)");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    out[std::stoi((*it)[1])] = std::stod((*it)[2]);
  }
  return out;
}

// Under asp nothing waits, so the turns go in (time, rank) order with each worker's times
// t, t + c, t + 2c, ... (its pull and its push of step k at k*c and (k+1)*c): a push's
// staleness is the pushes applied between its pull and it. The run's mean and largest
// staleness and its push count are those of that schedule, exactly.
TEST(VirtualTrainTest, AspStalenessIsTheOneTheModelledSpeedsGive) {
  TrainBench bench;
  const int steps = 80;
  const std::string log =
      bench.Run("asp", fmt::format("--workers=3 --servers=1 --iterations={} --consistency=asp "
                                   "--slow_worker=1:2.7 --slow_worker=2:4.3",
                                   steps));
  const std::map<int, double> c = StepSeconds(log);
  ASSERT_EQ(c.size(), 3u) << log;
  EXPECT_NEAR(c.at(1) / c.at(0), 2.7, 1e-9);
  // The schedule: events (time, rank); a worker pulls at t, pushes at t + c.
  struct Next {
    double t;
    int rank;
    bool operator>(const Next& o) const { return t != o.t ? t > o.t : rank > o.rank; }
  };
  std::priority_queue<Next, std::vector<Next>, std::greater<>> events;
  std::map<int, double> now;
  std::map<int, int64_t> base, done;
  std::map<int, bool> pulling;
  for (const auto& [rank, secs] : c) {
    events.push({0.0, rank});
    now[rank] = 0;
    pulling[rank] = true;
  }
  int64_t version = 0, sum = 0, max = 0, pushes = 0;
  while (!events.empty()) {
    const Next e = events.top();
    events.pop();
    if (pulling[e.rank]) {
      base[e.rank] = version;
      now[e.rank] += c.at(e.rank);
    } else {
      const int64_t staleness = version - base[e.rank];
      sum += staleness;
      max = std::max(max, staleness);
      ++version;
      ++pushes;
      if (++done[e.rank] == steps) continue;
    }
    pulling[e.rank] = !pulling[e.rank];
    events.push({now[e.rank], e.rank});
  }
  const nlohmann::json s = Summary(bench.Path("asp"));
  ASSERT_TRUE(s.is_object());
  const int64_t partitions = s.at("partition_pushes").get<int64_t>() / pushes;
  EXPECT_EQ(s.at("partition_pushes").get<int64_t>(), partitions * pushes);
  EXPECT_GE(partitions, 1);
  EXPECT_EQ(s.at("max_push_staleness").get<int64_t>(), max);
  EXPECT_NEAR(s.at("mean_push_staleness").get<double>(),
              static_cast<double>(sum) / static_cast<double>(pushes), 1e-4);
  EXPECT_GT(max, 3) << "the slow workers' pushes see the fast one's";
}

}  // namespace
}  // namespace hetps::testing
