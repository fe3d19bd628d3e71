// SyntheticWorkload: real tensors, a real objective, no data set. Worker r minimizes
// f_r(w) = 0.5 * ||w - t_r||^2 where t_r is seeded by its rank; the cluster's objective
// sum_r f_r has its optimum at w* = mean_r t_r, so every run shows whether the parameter server
// really converges: the printed distance to w* must fall. The gradient is w - t_r.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "hetps/client.h"

namespace hetps {

struct SyntheticOptions {
  std::vector<int64_t> tensor_elements = {100'000, 1'000'000, 2'500'000};
  int iterations = 50;
  uint64_t seed = 7;
  int progress_every = 10;
  // Simulated compute per iteration on top of the real gradient work, and a factor that
  // multiplies the whole compute time (a reproducible straggler: --slowdown=3).
  double compute_ms = 0;
  double slowdown = 1.0;
};

// Declares the tensors, runs the iterations (pull -> gradient -> push -> clock), meets the
// other workers in a barrier and checks the final distance to the optimum. Returns an error if
// any request fails or the distance did not shrink.
Status RunSynthetic(Client& client, const SyntheticOptions& options, const std::atomic<bool>& stop);
// What RunSynthetic refuses before it starts, checked without a cluster (--check_flags).
Status ValidateSyntheticOptions(const SyntheticOptions& options);

}  // namespace hetps
