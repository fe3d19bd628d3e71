// The consistency "committed": asynchronous uploads the scheduler commits one by one
// (scheduler/fed_rounds.h, --concurrency). A committed upload reaches the aggregator whole, as
// on arrival, with the staleness of its pull; an upload given up is dropped whole; tasks in
// flight are untouched by other tasks' commits.
#include <gtest/gtest.h>

#include "server/aggregation/aggregator.h"
#include "server/optimizer/optimizer.h"
#include "server/partition_store.h"
#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

class CommittedTest : public ::testing::Test {
 protected:
  void Use(const std::string& aggregator) {
    Partition p;
    p.length = 1;
    part_ = std::make_unique<PartitionState>(p, 0);
    const float zero = 0;
    part_->InitializeFrom(&zero);
    auto spec = Aggregators().Parse(aggregator);
    ASSERT_TRUE(spec.ok());
    optimizer_ = std::move(*MakeOptimizer("sgd:lr=1"));
    ASSERT_TRUE(CheckCombination(*spec, *Controllers().Parse("committed")).ok());
    part_->set_aggregator(Aggregators().EntryFor(spec->name()).make(*spec, *optimizer_));
    controller_ = Make("committed", 4);
  }
  // Worker w's upload under task `task`: the delta `delta`, computed from `base` version.
  void Upload(int64_t task, int32_t w, float delta, int64_t base) {
    part_->Hold(task, w, zmq::message_t(&delta, sizeof(float)), 10, base);
  }
  void Close(int64_t task, const std::vector<int32_t>& committed) {
    controller_->OnRoundClosed(task, committed, {});
    for (const RoundSpec& r : controller_->TakeRounds()) part_->ApplyRound(*optimizer_, r);
  }
  float value() const { return part_->values()[0]; }

  std::unique_ptr<PartitionState> part_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ConsistencyController> controller_;
};

TEST_F(CommittedTest, NothingWaitsAndOnlyCommittedUploadsAreApplied) {
  Use("sum");
  EXPECT_TRUE(controller_->synchronous()) << "uploads are held until their commit";
  EXPECT_TRUE(controller_->TryStart(1, 17, 0));
  EXPECT_TRUE(controller_->ReadReady(1, 17));
  Upload(3, 1, 2.0f, 0);
  Upload(4, 2, 5.0f, 0);  // another task in flight
  Close(3, {1});
  EXPECT_FLOAT_EQ(value(), -2.0f);
  EXPECT_EQ(part_->version(), 1);
  Close(4, {});  // given up: dropped whole
  EXPECT_FLOAT_EQ(value(), -2.0f);
  Close(4, {2});  // a late commit of a dropped task finds nothing
  EXPECT_FLOAT_EQ(value(), -2.0f);
  EXPECT_EQ(part_->version(), 1);
}

TEST_F(CommittedTest, FedAsyncMixesEachCommitWithItsStaleness) {
  Use("fedasync:alpha=0.5,staleness=constant");
  // Two tasks pulled version 0; the first commit is fresh, the second one version stale.
  Upload(0, 1, 2.0f, 0);  // local model 0 - 2 = -2
  Upload(1, 2, 4.0f, 0);  // local model -4
  Close(0, {1});
  EXPECT_FLOAT_EQ(value(), -1.0f);  // 0.5 * 0 + 0.5 * -2
  Close(1, {2});
  EXPECT_EQ(part_->version(), 2);
  // Each coordinate lies between the previous model and the client's model (ALGORITHMS.md §4).
  EXPECT_LT(value(), -1.0f);
  EXPECT_GT(value(), -4.0f);
}

TEST_F(CommittedTest, FedBuffStepsOncePerKCommits) {
  Use("fedbuff:k=2,exponent=0");
  Upload(0, 1, 2.0f, 0);
  Upload(1, 2, 4.0f, 0);
  Close(0, {1});
  EXPECT_EQ(part_->version(), 0) << "one delta buffered";
  Close(1, {2});
  EXPECT_EQ(part_->version(), 1);
  EXPECT_FLOAT_EQ(value(), -3.0f) << "w - lr * mean delta";
}

TEST_F(CommittedTest, AGroupOfUploadsIsOneStepOnTheirWeightedMean) {
  Use("sum");
  Upload(0, 1, 1.0f, 0);  // 10 samples each (Upload's weight)
  Upload(1, 2, 3.0f, 0);
  Upload(2, 3, 9.0f, 0);  // another task, still in flight
  controller_->OnRoundClosed(1, {1, 2}, {0, 1});
  for (const RoundSpec& r : controller_->TakeRounds()) part_->ApplyRound(*optimizer_, r);
  EXPECT_FLOAT_EQ(value(), -2.0f) << "w - lr * (10 * 1 + 10 * 3) / 20";
  EXPECT_EQ(part_->version(), 1) << "one step for the group";
  Close(2, {3});
  EXPECT_FLOAT_EQ(value(), -11.0f) << "the task in flight was left for its own commit";
}

TEST(CommittedCombinationTest, RoundAggregatorsAreRefused) {
  for (const char* a : {"fedavg", "temporal"}) {
    EXPECT_FALSE(CheckCombination(*Aggregators().Parse(a), *Controllers().Parse("committed")).ok())
        << a;
  }
}

}  // namespace
}  // namespace hetps::testing
