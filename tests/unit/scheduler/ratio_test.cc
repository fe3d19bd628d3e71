// AAFL's aggregation-ratio policies (ALGORITHMS.md §9) and their use by the scheduler's
// asynchronous rounds: exactly ceil(alpha N) uploads per aggregation, alpha = 1 is
// synchronous, and the greedy baseline never exceeds its budget when a ratio fits it.
#include "scheduler/ratio/ratio.h"

#include <gtest/gtest.h>

#include <random>

#include "scheduler/fed_rounds.h"

namespace hetps {
namespace {

double Ratio(const std::string& spec, const RatioState& state) {
  auto policy = MakeRatioPolicy(spec);
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return (*policy)->Ratio(state);
}

TEST(RatioTest, UploadsAreTheCeilingOfTheRatioTimesTheClients) {
  EXPECT_EQ(UploadsFor(0.5, 4), 2);
  EXPECT_EQ(UploadsFor(0.3, 10), 3);
  EXPECT_EQ(UploadsFor(0.31, 10), 4);
  EXPECT_EQ(UploadsFor(1.0, 7), 7);
  EXPECT_EQ(UploadsFor(0.01, 7), 1) << "at least one";
  EXPECT_DOUBLE_EQ(Ratio("fixed:alpha=0.25", {.clients = 8}), 0.25);
  EXPECT_FALSE(MakeRatioPolicy("fixed:alpha=0").ok());
  EXPECT_FALSE(MakeRatioPolicy("fixed:alpha=1.5").ok());
  EXPECT_FALSE(MakeRatioPolicy("oracle").ok());
}

TEST(RatioTest, GreedyMinimisesTimePerProgressWithinTheBudget) {
  // Three clients take 1 s, one 10 s: t_(K) / sqrt(K) is 1, 0.71, 0.58, 5 for K = 1..4.
  const RatioState s{.clients = 4, .train_s = {10, 1, 1, 1}};
  EXPECT_DOUBLE_EQ(Ratio("greedy", s), 0.75);
  // At most 2 uploads a second: K = 3 (3/s) is out, K = 2 (2/s) is the best that fits.
  EXPECT_DOUBLE_EQ(Ratio("greedy:budget=2", s), 0.5);
  // Before two clients are measured: every upload.
  EXPECT_DOUBLE_EQ(Ratio("greedy", {.clients = 4, .train_s = {3}}), 1.0);
}

TEST(RatioTest, GreedyNeverExceedsABudgetSomeRatioFits) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> time(0, 1);
  auto policy = MakeRatioPolicy("greedy:budget=3");
  ASSERT_TRUE(policy.ok());
  for (int trial = 0; trial < 200; ++trial) {
    RatioState s{.clients = 10};
    for (int i = 0; i < 10; ++i) s.train_s.push_back(time(rng));
    std::vector<double> sorted = s.train_s;
    std::sort(sorted.begin(), sorted.end());
    bool fits = false;
    for (int k = 1; k <= 10; ++k) fits |= k / sorted[k - 1] <= 3;
    if (!fits) continue;
    const int k = UploadsFor((*policy)->Ratio(s), 10);
    EXPECT_LE(k / sorted[k - 1], 3 + 1e-9) << "trial " << trial;
  }
}

// The scheduler's asynchronous rounds with a ratio policy: groups of exactly ceil(alpha N).
int GroupSize(const std::string& ratio, int clients) {
  std::vector<proto::FedRound> closes;
  std::map<int32_t, int64_t> tasks;
  FedRounds f({.rounds = 3, .concurrency = clients, .ratio = ratio},
              {.answer_checkin = [&](const Arrival& a,
                                     const proto::FedRound& r) { tasks[a.worker] = r.round(); },
               .answer_upload = [](const Arrival&, const proto::FedRound&) {},
               .answer_watch = [](const Arrival&, const proto::FedRound&) {},
               .close = [&](const proto::FedRound& r) { closes.push_back(r); },
               .live_servers = [] { return std::vector<int32_t>{9}; },
               .rank_of = [](int32_t id) { return id; }});
  for (int32_t w = 1; w <= clients; ++w) f.CheckIn({w, 1, "x"}, clients, 0);
  EXPECT_EQ(static_cast<int>(tasks.size()), clients);
  for (const auto& [w, task] : tasks) {
    f.Uploaded({w, 2, "x"}, task, clients, 1);
    if (!closes.empty()) return closes[0].workers_size();
  }
  return -1;
}

TEST(RatioTest, EachAggregationTakesExactlyTheEarliestCeilAlphaNUploads) {
  EXPECT_EQ(GroupSize("fixed:alpha=0.5", 4), 2);
  EXPECT_EQ(GroupSize("fixed:alpha=0.3", 10), 3);
  EXPECT_EQ(GroupSize("fixed:alpha=1", 5), 5) << "alpha = 1: every client, synchronous";
  EXPECT_FALSE(ValidateFedRoundsOptions({.ratio = "fixed:alpha=0.5"}).ok()) << "no concurrency";
  EXPECT_FALSE(ValidateFedRoundsOptions({.concurrency = 4, .quorum = 2, .ratio = "greedy"}).ok());
  EXPECT_TRUE(ValidateFedRoundsOptions({.concurrency = 4, .ratio = "greedy:budget=5"}).ok());
}

}  // namespace
}  // namespace hetps
