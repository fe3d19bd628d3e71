#include "scheduler/straggler.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

// A table of workers by id, as ClusterStats keeps them, with the detector's rules over it.
class Pool {
 public:
  explicit Pool(StragglerOptions options) : detector_(options) {}
  void AddWorker(int32_t id) { workers_.try_emplace(id); }
  void RemoveWorker(int32_t id) { workers_.erase(id); }
  void OnIteration(int32_t id, double ms) {
    if (auto it = workers_.find(id); it != workers_.end()) detector_.OnIteration(it->second, ms);
  }
  void SetBusy(int32_t id, double ms) { StragglerDetector::SetBusy(workers_.at(id), ms); }
  bool Update() { return detector_.Update(All()); }
  std::vector<int32_t> Flagged() const {
    std::vector<int32_t> ids;
    for (const auto& [id, w] : workers_) {
      if (w.flagged()) ids.push_back(id);
    }
    return ids;
  }
  std::string Reason(int32_t id) const { return workers_.at(id).Reason(); }
  double Reference(int32_t id) {
    const StragglerDetector::Workers all = All();
    return StragglerDetector::Reference(workers_.at(id), {all.begin(), all.end()});
  }
  const std::map<int32_t, StragglerState>& workers() const { return workers_; }

 private:
  StragglerDetector::Workers All() {
    StragglerDetector::Workers all;
    for (auto& [id, w] : workers_) all.push_back(&w);
    return all;
  }
  StragglerDetector detector_;
  std::map<int32_t, StragglerState> workers_;
};

// Feeds `n` iterations of `ms` to each worker of `times` (id -> ms) and updates the flags.
void Feed(Pool& d, const std::map<int32_t, double>& times, int n) {
  for (int i = 0; i < n; ++i) {
    for (const auto& [id, ms] : times) d.OnIteration(id, ms);
    d.Update();
  }
}

Pool Detector(int workers, StragglerOptions options = {.min_samples = 2}) {
  Pool d(options);
  for (int32_t id = 1; id <= workers; ++id) d.AddWorker(id);
  return d;
}

TEST(StragglerTest, FlagsExactlyTheSlowWorker) {
  Pool d = Detector(4);
  Feed(d, {{1, 10}, {2, 11}, {3, 30}, {4, 9}}, 5);
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{3});
  EXPECT_EQ(d.Reason(3), "slow");
  EXPECT_EQ(d.workers().at(3).times_flagged, 1);
  EXPECT_DOUBLE_EQ(d.Reference(3), 10.5);  // median of 9, 10, 11 and its own EWMA
}

TEST(StragglerTest, TwoWorkersCompareWithTheOther) {
  // The median of both would be their mean (20 for 10 and 30): 30 < 1.5 * 20 would hide it.
  Pool d = Detector(2);
  Feed(d, {{1, 10}, {2, 30}}, 3);
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{2});
}

TEST(StragglerTest, NeedsMinSamplesBeforeSlow) {
  Pool d = Detector(3, {});  // the default: 5 iterations of warm-up
  Feed(d, {{1, 10}, {2, 10}, {3, 100}}, 4);
  EXPECT_TRUE(d.Flagged().empty());
  Feed(d, {{1, 10}, {2, 10}, {3, 100}}, 1);
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{3});
}

TEST(StragglerTest, DeadlineScalesWithTheIterationTime) {
  Pool d = Detector(3);
  Feed(d, {{1, 400}, {2, 400}, {3, 400}}, 3);
  d.SetBusy(2, 1500);  // past the 1 s floor but within 4x 400 ms
  d.Update();
  EXPECT_TRUE(d.Flagged().empty());
  d.SetBusy(2, 1700);
  d.Update();
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{2});
}

TEST(StragglerTest, EwmaFollowsBetaHalf) {
  Pool d = Detector(1);
  d.OnIteration(1, 10);
  d.OnIteration(1, 20);
  EXPECT_DOUBLE_EQ(d.workers().at(1).ewma_ms, 15);
  EXPECT_DOUBLE_EQ(d.workers().at(1).var_ms2, 50);  // 0.5 * 0 + 0.5 * (20 - 10)^2
  d.OnIteration(1, 15);
  EXPECT_DOUBLE_EQ(d.workers().at(1).ewma_ms, 15);
}

TEST(StragglerTest, HysteresisKeepsTheFlagBetweenTheThresholds) {
  Pool d = Detector(3);
  Feed(d, {{1, 10}, {2, 10}, {3, 20}}, 6);
  ASSERT_EQ(d.Flagged(), std::vector<int32_t>{3});
  // 1.4x the median: below the flag threshold (1.5) but above the clear one (1.25): stays.
  Feed(d, {{1, 10}, {2, 10}, {3, 14}}, 10);
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{3});
  // A fresh worker at 1.4x is not flagged: the band only holds a flag, never raises one.
  Pool fresh = Detector(3);
  Feed(fresh, {{1, 10}, {2, 10}, {3, 14}}, 10);
  EXPECT_TRUE(fresh.Flagged().empty());
}

TEST(StragglerTest, RecoveryClearsTheFlag) {
  Pool d = Detector(3);
  Feed(d, {{1, 10}, {2, 10}, {3, 40}}, 4);
  ASSERT_EQ(d.Flagged(), std::vector<int32_t>{3});
  Feed(d, {{1, 10}, {2, 10}, {3, 10}}, 8);
  EXPECT_TRUE(d.Flagged().empty());
  EXPECT_EQ(d.workers().at(3).times_flagged, 1);
  // Slowing down again flags it a second time.
  Feed(d, {{1, 10}, {2, 10}, {3, 40}}, 4);
  EXPECT_EQ(d.workers().at(3).times_flagged, 2);
}

TEST(StragglerTest, MissedDeadlineFlagsAHungWorkerUntilItFinishes) {
  Pool d = Detector(3);
  Feed(d, {{1, 10}, {2, 10}, {3, 10}}, 4);
  d.SetBusy(3, 900);  // 90x its usual time, but under the 1 s floor: a loaded machine
  d.Update();
  EXPECT_TRUE(d.Flagged().empty());
  d.SetBusy(3, 1500);  // heartbeats arrive, the iteration does not finish
  d.Update();
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{3});
  EXPECT_EQ(d.Reason(3), "late");
  d.OnIteration(3, 10);  // it finished after all (busy resets)
  d.Update();
  EXPECT_TRUE(d.Flagged().empty());
}

TEST(StragglerTest, AClusterWidePauseFlagsNobody) {
  Pool d = Detector(4);
  Feed(d, {{1, 10}, {2, 10}, {3, 10}, {4, 10}}, 4);
  for (int32_t id = 1; id <= 2; ++id) d.SetBusy(id, 4000);  // half of them at once: a pause
  d.Update();
  EXPECT_TRUE(d.Flagged().empty());
  d.SetBusy(2, 0);
  d.Update();
  EXPECT_EQ(d.Flagged(), std::vector<int32_t>{1});  // one of four: a straggler
}

TEST(StragglerTest, TheMajorityDefinesNormal) {
  Pool d = Detector(3);
  Feed(d, {{1, 10}, {2, 100}, {3, 100}}, 4);
  EXPECT_TRUE(d.Flagged().empty());  // one fast worker is not a reason to flag two
  EXPECT_DOUBLE_EQ(d.Reference(1), 100);
  d.RemoveWorker(1);
  d.Update();
  EXPECT_TRUE(d.Flagged().empty());
  EXPECT_DOUBLE_EQ(d.Reference(2), 100);  // two left: the other one
}

TEST(StragglerTest, IgnoresNonsense) {
  Pool d = Detector(2);
  d.OnIteration(1, -5);
  d.OnIteration(7, 10);  // unknown worker
  d.SetBusy(1, -1);
  EXPECT_EQ(d.workers().at(1).iterations, 0);
  EXPECT_FALSE(d.Update());
  EXPECT_LT(d.Reference(1), 0);  // nobody measured yet
}

}  // namespace
}  // namespace hetps
