// What the fault tests with exact sums share: tensors served by each kind of owner, workers
// pushing ones (SGD, lr 1, from zeros: every element of a tensor ends at minus the number of
// pushes applied to it), and the check of that sum.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "hetps/client.h"

namespace hetps::testing {

// "small" is served by the network thread, "big" (1.2 MB) by an apply thread.
inline const std::vector<TensorSpec> kOnesTensors = {{"small", {1000}, 0}, {"big", {300000}, 1}};

// Every element of every tensor, as one value per tensor (they must all agree).
inline void ExpectOnesSums(Client& c, int64_t pushes_per_tensor) {
  for (const TensorSpec& t : kOnesTensors) {
    std::vector<float> w(t.NumElements());
    ASSERT_TRUE(c.Pull(t.name, w.data(), t.NumElements()).Wait().ok());
    for (float v : w) ASSERT_EQ(v, w[0]) << t.name << " holds different sums in one tensor";
    EXPECT_EQ(w[0], -static_cast<float>(pushes_per_tensor)) << t.name;
  }
}

// Worker `i`: pushes ones to each tensor and clocks until clock `steps`, counting acknowledged
// pushes in `acked`; stops, failing the test, at its first error (or once `failed` is set).
inline void PushOnes(Client& c, int i, int64_t steps, std::atomic<int>& acked,
                     std::atomic<bool>& failed) {
  std::vector<float> ones(300000, 1.0f);
  while (c.clock() < steps && !failed) {
    for (const TensorSpec& t : kOnesTensors) {
      Status s = c.Push(t.name, ones.data(), t.NumElements()).Wait();
      if (!s.ok()) {
        ADD_FAILURE() << "worker " << i << ": " << s.ToString();
        failed = true;
        return;
      }
      ++acked;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (Status s = c.Clock(); !s.ok()) {
      ADD_FAILURE() << "worker " << i << " clock: " << s.ToString();
      failed = true;
    }
  }
}

}  // namespace hetps::testing
