#include "scheduler/virtual_clock.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace hetps {

void VirtualClock::Hold(proto::MsgType type, const Arrival& arrival, int rank, double t,
                        proto::FedRound request) {
  if (!(t >= now_)) {  // NaN too
    spdlog::warn("worker {} (rank {}) reported virtual time {:.6f}, before the clock's {:.6f}",
                 arrival.worker, rank, t, now_);
    t = now_;
  }
  state_[arrival.worker] = kWaiting;
  const Key key{t, rank, ++seq_};
  held_[key] = Event{.t = t,
                     .rank = rank,
                     .seq = key.seq,
                     .type = type,
                     .arrival = arrival,
                     .request = std::move(request)};
}

void VirtualClock::Answered(int32_t worker, bool finished) {
  parked_.erase(worker);
  if (finished) {
    finished_.insert(worker);
    state_.erase(worker);
    return;
  }
  state_[worker] = now_;
}

void VirtualClock::Declare(int32_t worker, double t) {
  auto it = state_.find(worker);
  if (it == state_.end()) return;
  if (parked_.erase(worker) > 0) {
    it->second = std::max(t, now_);
  } else if (it->second != kWaiting && t > it->second) {
    it->second = t;
  }
}

void VirtualClock::Parked(int32_t worker) {
  state_[worker] = kWaiting;
  parked_.insert(worker);
}

void VirtualClock::Unparked(int32_t worker) {
  if (parked_.erase(worker) > 0) state_[worker] = now_;
}

void VirtualClock::Remove(int32_t worker) {
  state_.erase(worker);
  parked_.erase(worker);
  finished_.insert(worker);
  std::erase_if(held_, [&](const auto& kv) { return kv.second.arrival.worker == worker; });
}

double VirtualClock::Bound(const std::vector<int32_t>& live) const {
  double bound = kNever;
  for (int32_t id : live) {
    if (finished_.contains(id)) continue;
    auto it = state_.find(id);
    bound = std::min(bound, it == state_.end() ? -kNever : it->second);
  }
  return bound;
}

std::optional<VirtualClock::Event> VirtualClock::Release(const std::vector<int32_t>& live,
                                                         double not_after) {
  if (held_.empty()) return std::nullopt;
  auto first = held_.begin();
  if (first->first.t > not_after || !(first->first.t < Bound(live))) return std::nullopt;
  Event e = std::move(first->second);
  held_.erase(first);
  now_ = std::max(now_, e.t);
  return e;
}

bool VirtualClock::Fire(double t, const std::vector<int32_t>& live) {
  if (!held_.empty() && held_.begin()->first.t <= t) return false;
  if (!(t < Bound(live))) return false;
  now_ = std::max(now_, t);
  return true;
}

std::vector<int32_t> VirtualClock::Blocking(const std::vector<int32_t>& live) const {
  const double bound = Bound(live);
  std::vector<int32_t> out;
  if (bound == kNever) return out;
  for (int32_t id : live) {
    if (finished_.contains(id)) continue;
    auto it = state_.find(id);
    if ((it == state_.end() ? -kNever : it->second) == bound) out.push_back(id);
  }
  return out;
}

}  // namespace hetps
