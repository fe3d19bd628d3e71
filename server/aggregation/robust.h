// Robust aggregation (ALGORITHMS.md §13): rules that combine a group of client updates so that
// a minority of arbitrary (Byzantine) ones cannot move the result far. A group is a round's
// uploads (bsp, selected) or, under buffered asynchrony (asp, committed), `k` arrivals as
// FedBuff buffers them; the rule's result takes one server-optimizer step, so with SGD at lr 1
// the model moves by the robust aggregate of the deltas as FedAvg moves it by their mean.
// Sample-count weights are ignored: a Byzantine client could claim any. A server holds only its
// own partitions, so each rule sees the updates' slices of one partition: Krum's distances and
// the norm bound are per partition (a tensor, or a piece of a large one).
#pragma once

#include <cstdint>
#include <vector>

#include "server/aggregation/aggregator.h"

namespace hetps {

// `count` updates of `n` floats each, row after row.
struct UpdateGroup {
  const float* data = nullptr;
  size_t count = 0;
  int64_t n = 0;
  const float* row(size_t i) const { return data + i * static_cast<size_t>(n); }
};

class RobustAggregator : public Aggregator {
 public:
  RobustAggregator(const AlgorithmSpec& spec, const Optimizer& optimizer);

  bool rounds() const override { return true; }
  void Upload(PartitionState& part, const PushInfo& info, const float* update) override;
  void EndRound(PartitionState& part, int64_t clock) override;
  void OnPush(PartitionState& part, const PushInfo& info, const float* update) override;
  void Save(proto::AggregatorState& out) const override;
  Status Load(const proto::AggregatorState& in) override;

 protected:
  // The rule: the group's robust aggregate into `out` (group.n floats). `part` is the partition
  // the group updates (its id and version seed a rule's noise).
  virtual void Combine(const PartitionState& part, const UpdateGroup& group, float* out) = 0;

 private:
  void Append(const PartitionState& part, const float* update);
  void Step(PartitionState& part);

  const Optimizer& optimizer_;
  int64_t k_;
  std::vector<float> updates_;  // the group so far, row after row
  size_t count_ = 0;
};

// The parameter every robust aggregator takes: k, updates per step under buffered asynchrony.
ParamDef RobustGroupParam();
// The schedules robust aggregators are defined for: rounds, and arrivals in groups of k.
std::vector<ApplySchedule> RobustSchedules();

// Per coordinate, the median of the group's values (the mean of the two middle ones for an
// even count).
void CoordinateMedian(const UpdateGroup& group, float* out);

}  // namespace hetps
