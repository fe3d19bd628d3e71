#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

std::string FedBuffK(int k) {
  const std::string o = "fedbuff:k=" + std::to_string(k);
  return o;
}

TEST(FedBuffTest, ExactlyOneServerStepPerKUpdates) {
  OnePartition p(FedBuffK(3), {0});
  for (int i = 1; i <= 7; ++i) {
    p.Push(i % 2, p.state->version(), {1});
    EXPECT_EQ(p.state->version(), i / 3) << "after " << i << " updates";
  }
}

TEST(FedBuffTest, FreshDeltasWithUnitLrMoveTheModelByTheirMean) {
  OnePartition p(FedBuffK(4), {10, 10});
  p.Push(0, 0, {1, 4});
  p.Push(1, 0, {2, 4});
  p.Push(2, 0, {3, 4});
  p.Push(3, 0, {6, 4});
  EXPECT_EQ(p.values(), (std::vector<float>{7, 6}));  // 10 - mean
}

TEST(FedBuffTest, PermutationInvariantWithinABuffer) {
  std::vector<std::vector<float>> deltas = {{1, 2}, {3, -1}, {0.5f, 8}, {-2, 4}};
  std::vector<int> order = {0, 1, 2, 3};
  std::vector<float> first;
  do {
    OnePartition p(FedBuffK(4), {0, 0});
    for (int i : order) p.Push(i, 0, deltas[i]);
    if (first.empty()) first = p.values();
    EXPECT_EQ(p.values(), first);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(FedBuffTest, StaleDeltasWeighLess) {
  OnePartition p(FedBuffK(1), {0});
  p.Push(0, 0, {0});  // version 1
  p.Push(0, 0, {0});  // version 2
  p.Push(0, 0, {1});  // sigma = 2: weight 3^-0.5
  EXPECT_FLOAT_EQ(p.values()[0], -1.0f / std::sqrt(3.0f));
}

}  // namespace
}  // namespace hetps::testing
