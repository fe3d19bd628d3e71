// A single partition with an aggregator, for aggregator unit tests.
#pragma once

#include <memory>
#include <vector>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps::testing {

struct OnePartition {
  OnePartition(const AggregatorOptions& options, std::vector<float> init, double lr = 1.0) {
    Partition p;
    p.length = static_cast<int64_t>(init.size());
    OptimizerOptions o;
    o.lr = lr;
    optimizer = std::move(*MakeOptimizer("sgd", o));
    state = std::make_unique<PartitionState>(p, 0);
    state->InitializeFrom(init.data());
    state->set_aggregator(MakeAggregator(options, *optimizer));
  }
  void Push(int32_t worker, int64_t base, const std::vector<float>& g) {
    PushInfo info;
    info.worker = worker;
    info.base_version = base;
    state->aggregator()->OnPush(*state, info, g.data());
  }
  void Pull(int32_t worker) { state->aggregator()->OnPull(*state, worker); }
  std::vector<float> values() const {
    return {state->values(), state->values() + state->info().length};
  }

  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<PartitionState> state;
};

inline AggregatorOptions Options(const std::string& name) {
  AggregatorOptions o;
  o.name = name;
  return o;
}

}  // namespace hetps::testing
