// Aggregation-ratio policies of adaptive asynchronous federated learning (AAFL, Liu et al.,
// TMC; ALGORITHMS.md §9): before each aggregation the policy picks alpha in (0, 1], and the
// aggregation takes the earliest ceil(alpha * N) uploads of the N clients training at once
// (the scheduler's --concurrency). Chosen by a spec string (--ratio=greedy:budget=20) from the
// registry below; a new policy is one file with its Register function, one line in
// ratios.def, and its test.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/registry.h"

namespace hetps {

// What a policy sees before an aggregation.
struct RatioState {
  int clients = 0;              // N: clients training at once
  std::vector<double> train_s;  // expected training time of each measured client (EMA)
  int64_t aggregation = 0;      // aggregations so far
};

class RatioPolicy {
 public:
  virtual ~RatioPolicy() = default;
  // alpha in (0, 1].
  virtual double Ratio(const RatioState& state) = 0;
};

// ceil(alpha * clients), at least 1 and at most clients.
int UploadsFor(double alpha, int clients);

struct RatioEntry {
  std::function<std::unique_ptr<RatioPolicy>(const AlgorithmSpec&)> make;
};
using RatioRegistry = Registry<RatioEntry>;

const RatioRegistry& RatioPolicies();
StatusOr<std::unique_ptr<RatioPolicy>> MakeRatioPolicy(const std::string& spec);

}  // namespace hetps
