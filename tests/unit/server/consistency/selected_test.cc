// The consistency "selected": rounds the scheduler closes (scheduler/fed_rounds.h). Only the
// uploads a closed round keeps are applied, as one sample-weighted step; the others of that
// round, and late ones of earlier rounds, are dropped.
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
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{1, 3}));
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
  void Close(int64_t round, const std::vector<int32_t>& kept) {
    controller_->OnRoundClosed(round, kept, {});
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

}  // namespace
}  // namespace hetps::testing
