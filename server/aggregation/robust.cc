#include "server/aggregation/robust.h"

#include <algorithm>

#include "durable.pb.h"
#include "server/partition_store.h"

namespace hetps {

RobustAggregator::RobustAggregator(const AlgorithmSpec& spec, const Optimizer& optimizer)
    : optimizer_(optimizer), k_(spec.Int("k")) {}

void RobustAggregator::Append(const PartitionState& part, const float* update) {
  updates_.insert(updates_.end(), update, update + part.info().length);
  ++count_;
}

void RobustAggregator::Step(PartitionState& part) {
  if (count_ > 0) {
    const UpdateGroup group{updates_.data(), count_, part.info().length};
    std::vector<float> out(static_cast<size_t>(group.n));
    Combine(part, group, out.data());
    part.ApplyGradient(optimizer_, out.data(), 1.0f);
  }
  updates_.clear();
  count_ = 0;
}

void RobustAggregator::Upload(PartitionState& part, const PushInfo&, const float* update) {
  Append(part, update);
}

void RobustAggregator::EndRound(PartitionState& part, int64_t) { Step(part); }

void RobustAggregator::OnPush(PartitionState& part, const PushInfo&, const float* update) {
  Append(part, update);
  if (static_cast<int64_t>(count_) >= k_) Step(part);
}

// Only a partly filled group of arrivals lives between calls (a round is handed over at once).
void RobustAggregator::Save(proto::AggregatorState& out) const {
  if (count_ == 0) return;
  (*out.mutable_floats())["updates"] = FloatBytes(updates_);
  (*out.mutable_numbers())["count"] = static_cast<double>(count_);
}

Status RobustAggregator::Load(const proto::AggregatorState& in) {
  auto count = in.numbers().find("count");
  count_ = count == in.numbers().end() ? 0 : static_cast<size_t>(count->second);
  updates_.clear();
  auto updates = in.floats().find("updates");
  if (updates == in.floats().end()) {
    return count_ == 0 ? Status() : Status::Malformed("robust aggregator state without updates");
  }
  if (Status s = FloatsFrom(updates->second, updates_); !s.ok()) return s;
  if (count_ == 0 || updates_.size() % count_ != 0) {
    return Status::Malformed("robust aggregator state: updates do not divide into its count");
  }
  return Status();
}

ParamDef RobustGroupParam() {
  return ParamDef::Int("k", "10", 1, 1e6,
                       "updates combined per step under asynchrony (asp, committed); a round's "
                       "uploads under rounds");
}

std::vector<ApplySchedule> RobustSchedules() {
  return {ApplySchedule::kLockstepRounds, ApplySchedule::kScheduledRounds,
          ApplySchedule::kOnArrival, ApplySchedule::kCommitted};
}

void CoordinateMedian(const UpdateGroup& g, float* out) {
  std::vector<float> column(g.count);
  const size_t mid = g.count / 2;
  for (int64_t j = 0; j < g.n; ++j) {
    for (size_t i = 0; i < g.count; ++i) column[i] = g.row(i)[j];
    std::nth_element(column.begin(), column.begin() + mid, column.end());
    float m = column[mid];
    if (g.count % 2 == 0) {  // the other middle value: the largest of the lower half
      m = 0.5f * (m + *std::max_element(column.begin(), column.begin() + mid));
    }
    out[j] = m;
  }
}

}  // namespace hetps
