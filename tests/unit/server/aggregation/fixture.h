// A single partition with an aggregator, for aggregator unit tests.
#pragma once

#include <fmt/format.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "server/aggregation/aggregator.h"
#include "server/partition_store.h"

namespace hetps::testing {

struct OnePartition {
  // `spec`: an aggregator spec ("fedbuff:k=3"); the optimizer is SGD with `lr`.
  OnePartition(const std::string& spec, std::vector<float> init, double lr = 1.0) {
    Partition p;
    p.length = static_cast<int64_t>(init.size());
    optimizer = std::move(*MakeOptimizer(fmt::format("sgd:lr={}", lr)));
    state = std::make_unique<PartitionState>(p, 0);
    state->InitializeFrom(init.data());
    auto parsed = Aggregators().Parse(spec);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    state->set_aggregator(Aggregators().EntryFor(parsed->name()).make(*parsed, *optimizer));
  }
  // `loss`: the training loss the worker reported with the push (NaN: none).
  void Push(int32_t worker, int64_t base, const std::vector<float>& g,
            double loss = std::numeric_limits<double>::quiet_NaN()) {
    PushInfo info;
    info.worker = worker;
    info.base_version = base;
    info.loss = loss;
    state->aggregator()->OnPush(*state, info, g.data());
  }
  void Pull(int32_t worker) { state->aggregator()->OnPull(*state, worker); }
  // A closed round (bsp's, or one the scheduler closed): each upload handed over in worker
  // order, then the round ends, as PartitionState::ApplyRound does for a rounds aggregator.
  void Round(const std::vector<std::vector<float>>& uploads, int64_t clock = 0) {
    for (size_t w = 0; w < uploads.size(); ++w) {
      PushInfo info;
      info.worker = static_cast<int32_t>(w);
      info.clock = clock;
      info.base_version = state->version();
      state->aggregator()->Upload(*state, info, uploads[w].data());
    }
    state->aggregator()->EndRound(*state, clock);
  }
  std::vector<float> values() const {
    return {state->values(), state->values() + state->info().length};
  }

  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<PartitionState> state;
};

}  // namespace hetps::testing
