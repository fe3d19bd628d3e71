#include "server/partition_store.h"

#include <algorithm>

namespace hetps {

PartitionState::PartitionState(const Partition& partition, int num_slots)
    : info_(partition), values_(std::make_shared<std::vector<float>>(partition.length)) {
  for (int s = 0; s < num_slots; ++s) slots_.emplace_back(partition.length, 0.0f);
  for (auto& slot : slots_) slot_ptrs_.push_back(slot.data());
}

float* PartitionState::mutable_values() {
  // Only the owning thread creates references, and others only drop them, so a count of 1
  // means no snapshot is out and none can appear meanwhile.
  if (values_.use_count() > 1) values_ = std::make_shared<std::vector<float>>(*values_);
  return values_->data();
}

void PartitionState::ApplyGradient(const Optimizer& optimizer, const float* g, float scale) {
  ++version_;
  optimizer.Apply(mutable_values(), g, info_.length, slot_ptrs_.data(), version_, scale);
}

void PartitionState::SetValues(const float* values) {
  ++version_;
  std::copy(values, values + info_.length, mutable_values());
}

bool PartitionState::InitializeFrom(const float* values) {
  if (initialized_) return false;
  std::copy(values, values + info_.length, mutable_values());
  initialized_ = true;
  return true;
}

void PartitionState::Hold(int64_t clock, int32_t w, zmq::message_t gradient) {
  held_[clock][w].push_back(std::move(gradient));
}

int PartitionState::ApplyHeld(const Optimizer& optimizer, int64_t clock,
                              const std::vector<int32_t>& workers, bool mean) {
  int steps = 0;
  for (; !held_.empty() && held_.begin()->first <= clock; held_.erase(held_.begin())) {
    const int64_t c = held_.begin()->first;
    if (!workers.empty() && c != clock) continue;  // leftovers of closed rounds: dropped
    sum_.assign(info_.length, 0.0f);
    int contributors = 0;
    for (const auto& [worker, frames] : held_.begin()->second) {
      if (!workers.empty() && std::find(workers.begin(), workers.end(), worker) == workers.end()) {
        continue;  // not among the round's workers: dropped
      }
      ++contributors;
      for (const zmq::message_t& f : frames) {
        const float* g = static_cast<const float*>(f.data());
        for (int64_t i = 0; i < info_.length; ++i) sum_[i] += g[i];
      }
    }
    if (contributors == 0) continue;
    ApplyGradient(optimizer, sum_.data(), mean ? 1.0f / static_cast<float>(contributors) : 1.0f);
    ++steps;
  }
  return steps;
}

PartitionStore::PartitionStore(const ShardMap& map, int server_rank, const Optimizer& optimizer,
                               const Initializer& initializer, const AggregatorOptions& aggregation)
    : by_id_(map.partitions().size()) {
  for (const Partition& p : map.partitions()) {
    if (p.server_rank != server_rank) continue;
    auto state = std::make_unique<PartitionState>(p, optimizer.num_slots());
    state->set_aggregator(MakeAggregator(aggregation, optimizer));
    if (!initializer.from_worker()) {
      initializer.Fill(map.tensors()[p.tensor_id].name, p.offset, state->mutable_values(),
                       p.length);
      state->MarkInitialized();
    }
    bytes_ += p.length * static_cast<int64_t>(sizeof(float));
    ++count_;
    by_id_[p.id] = std::move(state);
  }
}

}  // namespace hetps
