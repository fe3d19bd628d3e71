#include "scheduler/straggler.h"

#include <algorithm>

namespace hetps {

void StragglerDetector::OnIteration(int32_t id, double ms) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !(ms >= 0)) return;
  Worker& w = it->second;
  if (w.ewma_ms < 0) {
    w.ewma_ms = ms;
  } else {
    const double dev = ms - w.ewma_ms;
    w.ewma_ms = options_.beta * w.ewma_ms + (1 - options_.beta) * ms;
    w.var_ms2 = options_.beta * w.var_ms2 + (1 - options_.beta) * dev * dev;
  }
  ++w.iterations;
  w.busy_ms = 0;
}

void StragglerDetector::SetBusy(int32_t id, double ms) {
  auto it = workers_.find(id);
  if (it != workers_.end() && ms >= 0) it->second.busy_ms = ms;
}

double StragglerDetector::MedianOfAll() const {
  std::vector<double> v;
  for (const auto& [id, w] : workers_) {
    if (w.ewma_ms >= 0) v.push_back(w.ewma_ms);
  }
  if (v.size() < 3) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double StragglerDetector::ReferenceGiven(int32_t id, double median_of_all) const {
  if (median_of_all >= 0) return median_of_all;
  // Two measured workers: the median of both is their mean, which a straggler can never exceed
  // by 2x or more, so each compares with the other.
  for (const auto& [other, w] : workers_) {
    if (other != id && w.ewma_ms >= 0) return w.ewma_ms;
  }
  return -1;
}

double StragglerDetector::Reference(int32_t id) const { return ReferenceGiven(id, MedianOfAll()); }

bool StragglerDetector::Update() {
  const double median = MedianOfAll();  // once per update, not once per worker
  std::map<int32_t, bool> late;
  size_t late_count = 0;
  for (auto& [id, w] : workers_) {
    const double ref = ReferenceGiven(id, median);
    bool is_late = false;
    if (ref > 0) {
      const double deadline =
          std::max(options_.deadline_factor * std::max(ref, w.ewma_ms), options_.deadline_min_ms);
      is_late = w.busy_ms > deadline;
    }
    late[id] = is_late;
    late_count += is_late;
  }
  const bool pause = !workers_.empty() && 2 * late_count >= workers_.size() && workers_.size() > 1;
  bool changed = false;
  for (auto& [id, w] : workers_) {
    const bool was = w.flagged();
    const double ref = ReferenceGiven(id, median);
    bool slow = w.slow;
    if (ref <= 0 || w.ewma_ms < 0) {
      slow = false;
    } else if (!w.slow) {
      slow = w.iterations >= options_.min_samples && w.ewma_ms > options_.factor * ref;
    } else {
      slow = w.ewma_ms >= options_.clear_factor * ref;
    }
    const bool is_late = late[id] && !pause;
    changed |= slow != w.slow || is_late != w.late;
    w.slow = slow;
    w.late = is_late;
    if (!was && w.flagged()) ++w.times_flagged;
  }
  return changed;
}

std::vector<int32_t> StragglerDetector::Flagged() const {
  std::vector<int32_t> ids;
  for (const auto& [id, w] : workers_) {
    if (w.flagged()) ids.push_back(id);
  }
  return ids;
}

std::string StragglerDetector::Reason(int32_t id) const {
  auto it = workers_.find(id);
  if (it == workers_.end()) return "";
  const Worker& w = it->second;
  if (w.slow && w.late) return "slow, late";
  if (w.slow) return "slow";
  if (w.late) return "late";
  return "";
}

}  // namespace hetps
