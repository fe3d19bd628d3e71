#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(TemporalTest, WeightsSumToOneAndDecayByTwoOverE) {
  auto w = TemporalWeights({10, 20, 30}, {5, 3, 1}, 5);
  EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 1.0, 1e-12);
  // All uploads of this round: plain sample weighting, i.e. FedAvg.
  auto fresh = TemporalWeights({1, 3}, {7, 7}, 7);
  EXPECT_DOUBLE_EQ(fresh[0], 0.25);
  EXPECT_DOUBLE_EQ(fresh[1], 0.75);
  // Equal samples, one round older: relative weight (e/2)^-1 = 0.736.
  auto old = TemporalWeights({1, 1}, {7, 6}, 7);
  EXPECT_NEAR(old[1] / old[0], 2 / std::exp(1.0), 1e-12);
  EXPECT_NEAR(old[1] / old[0], 0.736, 1e-3);
}

RoundSpec Round(int64_t clock) {
  RoundSpec r;
  r.clock = clock;
  return r;
}

TEST(TemporalTest, AveragesEveryClientsLatestModelAndSkipsRoundsWithoutUploads) {
  OnePartition p("temporal", {10});
  ASSERT_TRUE(p.state->aggregator()->rounds());
  p.Pull(1);
  p.Pull(2);
  // Round 0: client 1 moved to 10 - 4 = 6 (1 sample), client 2 to 10 - 2 = 8 (3 samples).
  float d1 = 4, d2 = 2;
  p.state->Hold(0, 1, zmq::message_t(&d1, 4), 1, 0);
  p.state->Hold(0, 2, zmq::message_t(&d2, 4), 3, 0);
  EXPECT_EQ(p.state->ApplyRound(*p.optimizer, Round(0)), 1);
  EXPECT_FLOAT_EQ(p.values()[0], (1 * 6.0f + 3 * 8.0f) / 4);
  const int64_t version = p.state->version();
  // Round 1: nobody uploads this partition (a deep layer off its rounds): unchanged.
  EXPECT_EQ(p.state->ApplyRound(*p.optimizer, Round(1)), 0);
  EXPECT_EQ(p.state->version(), version);
  EXPECT_FLOAT_EQ(p.values()[0], 7.5f);
  // Round 2: only client 1 uploads (10 - 1 = 9 from its last read, 10); client 2's copy is now
  // two rounds old.
  float d3 = 1;
  p.state->Hold(2, 1, zmq::message_t(&d3, 4), 1, 0);
  EXPECT_EQ(p.state->ApplyRound(*p.optimizer, Round(2)), 1);
  const double a = std::exp(1.0) / 2, w1 = 1, w2 = 3 * std::pow(a, -2);
  EXPECT_NEAR(p.values()[0], (w1 * 9 + w2 * 8) / (w1 + w2), 1e-5);
}

}  // namespace
}  // namespace hetps::testing
