// Virtual time (--clock=virtual, docs/virtual-time.md): real clients, servers and aggregation,
// but when things happen comes from the scenario's device and link models, so a federated run's
// outcome (which uploads each aggregation kept, in which order, with which staleness, the model
// after it, the accuracy against virtual time) depends only on the scenario and the seeds: the
// same with two CPU-bound processes competing for this machine's cores, and on three servers
// instead of two.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "common/rdp_accountant.h"
#include "tests/integration/fed_bench.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// The scenario of FedBench, heterogeneous: devices slowed by exp(|z|), links of 2/10 Mbit/s
// spread log-normally with latency and jitter, every request in virtual time.
struct VirtualBench : FedBench {
  explicit VirtualBench(int uploads, const std::string& more = "") : FedBench(uploads) {
    std::ofstream(scenario, std::ios::app)
        << "--clock=virtual\n--device_spread=1.0\n--device_gflops=0.01\n--link_up_mbps=2\n"
           "--link_down_mbps=10\n--link_spread=0.7\n--link_latency_ms=40\n"
           "--link_jitter_ms=10\n--link_seed=5\n"
        << more;
  }
  // Runs `hetps fed run` with `args` into run_dir/<name>; fails the test on a non-zero exit.
  std::string Run(const std::string& name, const std::string& args) const {
    const std::string dir = run_dir + "/" + name, log = Path(name + ".log");
    const int code =
        WaitCode(Start("run --flagfile=" + scenario + " --run_dir=" + dir + " " + args, log), 180s);
    EXPECT_EQ(code, 0) << Slurp(log);
    return dir;
  }
};

// The rounds log without its column host_s (the host's seconds, which may differ).
std::string Outcome(const std::string& rounds_csv) {
  std::istringstream in(Slurp(rounds_csv));
  std::string out;
  size_t host = std::string::npos;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream fields(line + ",");
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (host == std::string::npos) {
      host = std::find(cells.begin(), cells.end(), "host_s") - cells.begin();
    }
    if (host < cells.size()) cells.erase(cells.begin() + static_cast<std::ptrdiff_t>(host));
    for (const std::string& c : cells) out += c + ",";
    out += "\n";
  }
  return out;
}

void ExpectSameOutcome(const std::string& a, const std::string& b, const char* what) {
  const std::string rounds = Outcome(a + "/rounds.csv");
  EXPECT_GT(std::count(rounds.begin(), rounds.end(), '\n'), 2) << rounds;
  EXPECT_EQ(rounds, Outcome(b + "/rounds.csv")) << what;
  const std::string ma = Slurp(a + "/model.bin"), mb = Slurp(b + "/model.bin");
  EXPECT_FALSE(ma.empty()) << a;
  EXPECT_TRUE(ma == mb) << what << ": the final models differ";
}

TEST(VirtualTimeTest, ASynchronousRunDependsOnlyOnItsSeeds) {
  VirtualBench bench(8);
  const std::string plain = bench.Run("plain", "--algorithm=fedavg");
  const std::string header = Slurp(plain + "/rounds.csv").substr(0, 200);
  EXPECT_NE(header.find(",late,host_s,epsilon,clip\n"), std::string::npos) << header;
  std::string busy;
  {
    CpuHogs hogs;
    busy = bench.Run("busy", "--algorithm=fedavg");
  }
  ExpectSameOutcome(plain, busy, "with two CPU-bound processes beside it");
  const std::string sharded = bench.Run("sharded", "--algorithm=fedavg --servers=3");
  ExpectSameOutcome(plain, sharded, "on three servers instead of two");
  const std::string other = bench.Run("other", "--algorithm=fedavg --selection_seed=9");
  EXPECT_NE(Outcome(plain + "/rounds.csv"), Outcome(other + "/rounds.csv"))
      << "another selection seed draws other clients";
}

TEST(VirtualTimeTest, AnAsynchronousRunDependsOnlyOnItsSeeds) {
  VirtualBench bench(12);
  for (const char* algorithm : {"fedbuff", "fedsa"}) {
    const std::string plain =
        bench.Run(std::string(algorithm) + "-plain", std::string("--algorithm=") + algorithm);
    std::string busy;
    {
      CpuHogs hogs;
      busy = bench.Run(std::string(algorithm) + "-busy", std::string("--algorithm=") + algorithm);
    }
    ExpectSameOutcome(plain, busy, algorithm);
  }
}

// Round deadlines and availability count virtual seconds: clients go offline and come back on
// the scenario's schedule, some fail mid-round, rounds close at their deadline without the
// slowest (a deadline fires before any later upload, also when the failed client's check-in is
// what lets both go), and the outcome is still the seeds'.
TEST(VirtualTimeTest, DeadlinesAndAvailabilityRunInVirtualTime) {
  VirtualBench bench(8,
                     "--availability=onoff:on_s=20,off_s=10\n--round_deadline_ms=9000\n"
                     "--fail_fraction=0.3\n");
  const std::string a = bench.Run("a", "--algorithm=fedavg");
  std::string b;
  {
    CpuHogs hogs;
    b = bench.Run("b", "--algorithm=fedavg");
  }
  ExpectSameOutcome(a, b, "with deadlines and availability");
  const std::string log = Slurp(a + "/launch.log");
  EXPECT_NE(log.find("is offline until"), std::string::npos) << "no client went offline";
  EXPECT_NE(log.find("selected clients missed it"), std::string::npos);
}

}  // namespace
}  // namespace hetps::testing

namespace hetps::testing {
namespace {

// The ranks a run's log says are Byzantine (worker/edge/attack.h).
std::set<std::string> Attackers(const std::string& run) {
  std::set<std::string> ranks;
  const std::string log = Slurp(run + "/launch.log");
  const std::regex said(R"(client (\d+) is Byzantine)");
  for (auto m = std::sregex_iterator(log.begin(), log.end(), said); m != std::sregex_iterator();
       ++m) {
    ranks.insert((*m)[1]);
  }
  return ranks;
}

// The run's final accuracy (summary.json).
double FinalAccuracy(const std::string& run) {
  const auto summary = nlohmann::json::parse(Slurp(run + "/summary.json"), nullptr, false);
  EXPECT_FALSE(summary.is_discarded()) << run;
  return summary.is_discarded() ? 0
                                : summary["algorithms"][0]["final_accuracy"]["mean"].get<double>();
}

// Two of six clients upload 30x their delta: the mean follows them, the coordinate-wise median
// of each round's five uploads does not; the attackers are the same clients in every run, and
// a run with seeded Gaussian attackers repeats exactly.
TEST(VirtualTimeTest, AttackersAreSeededAndRobustRulesHoldWhereTheMeanDoesNot) {
  VirtualBench bench(40, "--parallel=5\n--per_round=5\n--byzantine_fraction=0.34\n");
  const std::string mean = bench.Run("mean", "--algorithm=fedavg --attack=scale:factor=30");
  const std::string median = bench.Run("median", "--algorithm=median --attack=scale:factor=30");
  EXPECT_EQ(Attackers(mean).size(), 2u) << "round(0.34 x 6) clients";
  EXPECT_EQ(Attackers(mean), Attackers(median));
  const double attacked = FinalAccuracy(mean), robust = FinalAccuracy(median);
  EXPECT_GT(robust, attacked + 0.2) << "median " << robust << ", mean " << attacked;
  const std::string noisy = bench.Run("noisy", "--algorithm=krum:f=1 --attack=gaussian:std=1");
  const std::string again = bench.Run("again", "--algorithm=krum:f=1 --attack=gaussian:std=1");
  ExpectSameOutcome(noisy, again, "the same seeds, the same attack");
}

}  // namespace
}  // namespace hetps::testing

namespace hetps::testing {
namespace {

// A column of the rounds log, by name.
std::vector<std::string> Column(const std::string& rounds_csv, const std::string& name) {
  std::istringstream in(Slurp(rounds_csv));
  std::vector<std::string> out;
  size_t at = std::string::npos;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream fields(line + ",");
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (at == std::string::npos) {
      at = std::find(cells.begin(), cells.end(), name) - cells.begin();
    } else if (at < cells.size()) {
      out.push_back(cells[at]);
    }
  }
  return out;
}

// --dp=central: the servers add DP-FedAvg's noise (the run differs from one without it) and the
// rounds log carries the epsilon the accountant spent after each round, one sampled Gaussian
// mechanism per round at 3 selected of 6 clients.
TEST(VirtualTimeTest, CentralPrivacyNoisesTheRoundsAndAccountsForEach) {
  VirtualBench bench(12);
  const std::string plain = bench.Run("plain", "--algorithm=fedavg");
  const std::string dp = bench.Run("dp", "--algorithm=fedavg --dp=central:clip=0.5,noise=1.5");
  EXPECT_NE(Slurp(plain + "/model.bin"), Slurp(dp + "/model.bin"));
  EXPECT_NE(Slurp(dp + "/launch.log").find("aggregator dp_fedavg:clip=0.5,noise=1.5"),
            std::string::npos);
  const std::vector<std::string> eps = Column(dp + "/rounds.csv", "epsilon");
  ASSERT_EQ(eps.size(), 6u) << "12 uploads in rounds of 2";
  RdpAccountant expected;
  for (const std::string& e : eps) {
    expected.AddSampledGaussian(3.0 / 6, 1.5);
    EXPECT_NEAR(std::stod(e), expected.Epsilon(1e-5).first, 1e-4);
  }
  EXPECT_TRUE(Column(plain + "/rounds.csv", "epsilon").front().empty()) << "no --dp, no epsilon";
  EXPECT_TRUE(Column(dp + "/rounds.csv", "clip").front().empty()) << "a fixed clip";
}

// FedBuff's buffer under secure aggregation in virtual time: cohorts of 2 clients, 3 of them in
// flight at once (6 slots), each one secure round whose unmasked sum is one staleness-weighted
// step; cohorts close out of order, and a run repeats to the bit.
TEST(VirtualTimeTest, SecureFedBuffCohortsRunInVirtualTimeAndRepeat) {
  VirtualBench bench(12, "--parallel=6\n--per_round=2\n");
  const std::string a = bench.Run("cohorts-a", "--algorithm=fedbuff --secure_aggregation=secagg+");
  const std::string b = bench.Run("cohorts-b", "--algorithm=fedbuff --secure_aggregation=secagg+");
  ExpectSameOutcome(a, b, "secure FedBuff cohorts in virtual time");
  const std::string log = Slurp(a + "/launch.log");
  EXPECT_NE(log.find("cohort 2: 2 clients selected"), std::string::npos) << log;
  EXPECT_NE(log.find("uploads unmasked"), std::string::npos) << log;
  EXPECT_EQ(log.find("applies nothing"), std::string::npos) << log;
  EXPECT_EQ(Column(a + "/rounds.csv", "kept").size(), 6u) << "12 uploads in cohorts of 2";
}

// Adaptive clipping (quantile): from a clip far below every update's norm, each round's clients
// report their updates above it and the clip grows by about exp(clip_lr x quantile) a round
// (the count's noise, std 0.3 over 2 kept, moves it little); the rounds log carries each round's
// clip and the accountant counts the fixed clip's mechanism. The same under distributed DP (the
// clients' noised bits summed under the secure rounds' masks, over-committed rounds of 3
// selected and 2 kept) and local DP (each client's bit noised by itself, std 0.3 each: the count
// is noisier, so only the growth over the run is checked).
TEST(VirtualTimeTest, AdaptiveClippingGrowsTheClipTowardsTheUpdateNorms) {
  VirtualBench bench(12);
  const std::string adaptive = ":clip=0.0001,noise=0.5,quantile=0.5,clip_lr=0.5,count_noise=0.3";
  for (const std::string mode : {"central", "distributed", "local"}) {
    const std::string secure = mode == "distributed" ? " --secure_aggregation=secagg+" : "";
    const std::string run =
        bench.Run("adaptive-" + mode, "--algorithm=fedavg --dp=" + mode + adaptive + secure);
    const std::vector<std::string> clips = Column(run + "/rounds.csv", "clip");
    const std::vector<std::string> eps = Column(run + "/rounds.csv", "epsilon");
    ASSERT_EQ(clips.size(), 6u) << mode;
    EXPECT_NEAR(std::stod(clips[0]), 0.0001, 1e-9) << mode;
    RdpAccountant expected;
    for (size_t i = 0; i < clips.size(); ++i) {
      if (i > 0 && mode != "local") {
        const double step = std::stod(clips[i]) / std::stod(clips[i - 1]);
        EXPECT_GT(step, 1.0) << mode << " round " << i;  // exp(0.25 +- 0.26): 3.5 sigma
        EXPECT_LT(step, 1.7) << mode << " round " << i;
      }
      expected.AddSampledGaussian(3.0 / 6, 0.5);
      if (mode != "local") {
        EXPECT_NEAR(std::stod(eps[i]), expected.Epsilon(1e-5).first, 1e-4) << mode;
      } else if (i > 0) {  // the client aggregated most often's uploads
        EXPECT_GE(std::stod(eps[i]), std::stod(eps[i - 1])) << "local";
      }
    }
    EXPECT_GT(std::stod(eps.back()), std::stod(eps.front())) << mode;
    EXPECT_GT(std::stod(clips.back()), 2.5 * std::stod(clips.front()))
        << mode << ": exp(5 x 0.25) = 3.5";
    EXPECT_NE(Slurp(run + "/launch.log").find("within clip"), std::string::npos) << mode;
  }
}

}  // namespace
}  // namespace hetps::testing

namespace hetps::testing {
namespace {

// Secure aggregation in virtual time: the protocol's exchanges happen between a client's task
// and its upload report, which the virtual clock orders; since the masks cancel exactly the run
// repeats to the bit like any virtual-time run (the keys are random, the sums are not). The
// rounds over-commit (6 selected, the first 3 kept): each secret's 6 holders need 4 shares, so
// the unmasking needs the late clients', whose reports the clock takes out of order for it.
// With clients failing after their setup (30%), what each round unmasks (or, when too few
// holders of a dropped client's mask key are left, that it applies nothing) is the seeds' too:
// the unmasking waits for every holder still there, and a failed client's check-in says at once
// that it will not reveal.
TEST(VirtualTimeTest, SecureRoundsRunInVirtualTimeAndRepeat) {
  VirtualBench bench(8, "--parallel=6\n--per_round=3\n");
  const std::string a = bench.Run("secure-a", "--algorithm=fedavg --secure_aggregation=secagg+");
  const std::string b = bench.Run("secure-b", "--algorithm=fedavg --secure_aggregation=secagg+");
  ExpectSameOutcome(a, b, "over-committed secure rounds in virtual time");
  const std::string log = Slurp(a + "/launch.log");
  EXPECT_NE(log.find("6 clients selected of 6 idle, keeps the first 3"), std::string::npos) << log;
  EXPECT_NE(log.find("secure round 0: 5 neighbours each, threshold 4"), std::string::npos) << log;
  EXPECT_NE(log.find("secure round 0: 3 uploads unmasked"), std::string::npos) << log;
  EXPECT_EQ(log.find("applies nothing"), std::string::npos) << log;
  VirtualBench failing(8,
                       "--parallel=6\n--per_round=3\n--fail_fraction=0.3\n"
                       "--round_deadline_ms=600000\n");
  const std::string c = failing.Run("fail-a", "--algorithm=fedavg --secure_aggregation=secagg+");
  const std::string d = failing.Run("fail-b", "--algorithm=fedavg --secure_aggregation=secagg+");
  ExpectSameOutcome(c, d, "over-committed secure rounds with failing clients");
  const std::string fails = Slurp(c + "/launch.log");
  EXPECT_NE(fails.find(" fails in round "), std::string::npos) << fails;
  EXPECT_NE(fails.find("uploads unmasked"), std::string::npos) << fails;
}

}  // namespace
}  // namespace hetps::testing
