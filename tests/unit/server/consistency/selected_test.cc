// The consistency "selected": rounds the scheduler closes (scheduler/fed_rounds.h). Only the
// uploads a closed round keeps are applied, as one sample-weighted step; the others of that
// round, and late ones of earlier rounds, are dropped, unless the scheduler accepts late
// results (--late_rounds): then they wait that many rounds and join the step of the close that
// names them, weighted by their factor.
#include <gtest/gtest.h>

#include "server/aggregation/aggregator.h"
#include "server/optimizer/optimizer.h"
#include "server/partition_store.h"
#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

TEST(SelectedTest, NothingWaitsOnClocksAndOnlyClosedRoundsAreApplied) {
  auto c = Make("selected", 4);
  EXPECT_TRUE(c->synchronous());
  for (int64_t clock : {0, 5, 40}) {
    EXPECT_TRUE(c->TryStart(2, clock, 1.0));
    EXPECT_TRUE(c->ReadReady(2, clock));
  }
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.0);
  EXPECT_TRUE(c->TakeRounds().empty()) << "clocks close nothing; the scheduler does";
  c->OnRoundClosed(0, {3, 1}, {});
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].clock, 0);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{3, 1}))
      << "in the scheduler's order (under virtual time: the uploads' virtual order), which the "
         "step sums in";
  EXPECT_TRUE(rounds[0].only_clock);
  EXPECT_TRUE(rounds[0].one_step);
  EXPECT_EQ(rounds[0].combine, RoundSpec::Combine::kWeighted);
  c->OnRoundClosed(1, {}, {});
  EXPECT_TRUE(c->TakeRounds().empty()) << "a round that kept nobody applies nothing";
}

class SelectedPartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Partition p;
    p.length = 1;
    part_ = std::make_unique<PartitionState>(p, 0);
    const float zero = 0;
    part_->InitializeFrom(&zero);
    auto spec = Aggregators().Parse("fedavg");
    ASSERT_TRUE(spec.ok());
    optimizer_ = std::move(*MakeOptimizer("sgd:lr=1"));
    part_->set_aggregator(Aggregators().EntryFor("fedavg").make(*spec, *optimizer_));
    controller_ = Make("selected", 4);
  }
  // Worker w's upload of round `round`: the delta `delta` over `samples` samples.
  void Upload(int64_t round, int32_t w, float delta, double samples) {
    part_->Hold(round, w, zmq::message_t(&delta, sizeof(float)), samples, part_->version());
  }
  void Close(int64_t round, const std::vector<int32_t>& kept,
             const std::vector<RoundSpec::Late>& late = {}, int64_t late_rounds = 0) {
    controller_->OnRoundClosed(round, kept, {}, late, late_rounds);
    for (const RoundSpec& r : controller_->TakeRounds()) part_->ApplyRound(*optimizer_, r);
  }
  float value() const { return part_->values()[0]; }

  std::unique_ptr<PartitionState> part_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ConsistencyController> controller_;
};

TEST_F(SelectedPartitionTest, ARoundAppliesTheSampleWeightedMeanOfTheKeptUploadsOnly) {
  Upload(0, 0, 1.0f, 10);
  Upload(0, 1, 4.0f, 30);
  Upload(0, 2, 100.0f, 50);  // selected, not kept
  Close(0, {0, 1});
  // sgd lr 1 on the weighted mean delta (10 * 1 + 30 * 4) / 40 = 3.25: w = 0 - 3.25.
  EXPECT_FLOAT_EQ(value(), -3.25f);
  EXPECT_EQ(part_->version(), 1);
  // The dropped upload never comes back: round 1 keeps worker 3 only.
  Upload(1, 3, 2.0f, 5);
  Close(1, {3});
  EXPECT_FLOAT_EQ(value(), -5.25f);
}

TEST_F(SelectedPartitionTest, AnUploadArrivingAfterItsRoundClosedIsNeverApplied) {
  Upload(0, 0, 1.0f, 10);
  Close(0, {0});
  EXPECT_FLOAT_EQ(value(), -1.0f);
  Upload(0, 1, 50.0f, 10);  // late: round 0 closed without it
  Upload(1, 2, 2.0f, 10);
  Close(1, {2});
  EXPECT_FLOAT_EQ(value(), -3.0f);
  // Even naming the late worker in a later round does not apply its round-0 upload.
  Upload(2, 0, 1.0f, 10);
  Close(2, {0, 1});
  EXPECT_FLOAT_EQ(value(), -4.0f);
}

// --late_rounds=1: round 0's unused upload waits; round 1 takes it late with factor 1/2, in
// its own step: (10 * 2 + 10 * 0.5 * 50) / (10 + 5) = 18 (fedavg, sgd lr 1).
TEST_F(SelectedPartitionTest, ALateUploadJoinsTheStepOfTheCloseThatNamesIt) {
  Upload(0, 0, 1.0f, 10);
  Close(0, {0}, {}, /*late_rounds=*/1);
  EXPECT_FLOAT_EQ(value(), -1.0f);
  Upload(0, 1, 50.0f, 10);  // late, kept on the server
  Upload(0, 3, 70.0f, 10);  // late too, never accepted
  Upload(1, 2, 2.0f, 10);
  Close(1, {2}, {{.worker = 1, .clock = 0, .factor = 0.5}}, 1);
  EXPECT_FLOAT_EQ(value(), -1.0f - 18.0f);
  EXPECT_EQ(part_->version(), 2) << "one step for round 1 and its late upload";
  // Worker 3's round-0 upload is two rounds late by round 2's close: dropped, never applied.
  Upload(2, 0, 1.0f, 10);
  Close(2, {0}, {{.worker = 3, .clock = 0, .factor = 1.0 / 3}}, 1);
  EXPECT_FLOAT_EQ(value(), -20.0f);
  EXPECT_EQ(part_->held_clocks(), 0u);
}

TEST_F(SelectedPartitionTest, ACloseWithOnlyALateUploadAppliesItAndNothingOfItsOwnRound) {
  Close(0, {}, {}, 1);  // nobody made round 0
  Upload(0, 1, 8.0f, 10);
  Upload(1, 2, 100.0f, 10);  // round 1's upload, not kept by round 1
  Close(1, {}, {{.worker = 1, .clock = 0, .factor = 0.5}}, 1);
  EXPECT_FLOAT_EQ(value(), -8.0f);  // the weighted mean of one upload is that upload
  EXPECT_EQ(part_->version(), 1);
  EXPECT_EQ(part_->held_clocks(), 1u) << "round 1's unused upload waits one round";
}

}  // namespace
}  // namespace hetps::testing
