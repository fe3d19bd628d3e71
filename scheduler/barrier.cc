#include "scheduler/barrier.h"

namespace hetps {

void Barrier::Arrive(Arrival arrival) { arrived_[arrival.worker] = std::move(arrival); }

void Barrier::Remove(int32_t worker) { arrived_.erase(worker); }

std::vector<Arrival> Barrier::TryRelease(const std::vector<int32_t>& live) {
  if (arrived_.empty()) return {};
  for (int32_t id : live) {
    if (!arrived_.contains(id)) return {};
  }
  std::vector<Arrival> released;
  for (auto& [id, a] : arrived_) released.push_back(std::move(a));
  arrived_.clear();
  ++generation_;
  return released;
}

}  // namespace hetps
