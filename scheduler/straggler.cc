#include "scheduler/straggler.h"

#include <algorithm>

namespace hetps {

std::string StragglerState::Reason() const {
  if (slow && late) return "slow, late";
  if (slow) return "slow";
  if (late) return "late";
  return "";
}

void StragglerDetector::OnIteration(StragglerState& w, double ms) const {
  if (!(ms >= 0)) return;
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

void StragglerDetector::SetBusy(StragglerState& w, double ms) {
  if (ms >= 0) w.busy_ms = ms;
}

double StragglerDetector::MedianOfAll(const ConstWorkers& workers) {
  std::vector<double> v;
  for (const StragglerState* w : workers) {
    if (w->ewma_ms >= 0) v.push_back(w->ewma_ms);
  }
  if (v.size() < 3) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double StragglerDetector::ReferenceGiven(const StragglerState& w, const ConstWorkers& workers,
                                         double median) {
  if (median >= 0) return median;
  // Two measured workers: the median of both is their mean, which a straggler can never exceed
  // by 2x or more, so each compares with the other.
  for (const StragglerState* other : workers) {
    if (other != &w && other->ewma_ms >= 0) return other->ewma_ms;
  }
  return -1;
}

double StragglerDetector::Reference(const StragglerState& w, const ConstWorkers& workers) {
  return ReferenceGiven(w, workers, MedianOfAll(workers));
}

bool StragglerDetector::Update(const Workers& mutable_workers) const {
  const ConstWorkers workers(mutable_workers.begin(), mutable_workers.end());
  const double median = MedianOfAll(workers);  // once per update, not once per worker
  std::vector<bool> late(workers.size());
  size_t late_count = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    const StragglerState& w = *workers[i];
    const double ref = ReferenceGiven(w, workers, median);
    if (ref > 0) {
      const double deadline =
          std::max(options_.deadline_factor * std::max(ref, w.ewma_ms), options_.deadline_min_ms);
      late[i] = w.busy_ms > deadline;
    }
    late_count += late[i];
  }
  const bool pause = workers.size() > 1 && 2 * late_count >= workers.size();
  bool changed = false;
  for (size_t i = 0; i < workers.size(); ++i) {
    StragglerState& w = *mutable_workers[i];
    const bool was = w.flagged();
    const double ref = ReferenceGiven(w, workers, median);
    bool slow = w.slow;
    if (ref <= 0 || w.ewma_ms < 0) {
      slow = false;
    } else if (!w.slow) {
      slow = w.iterations >= options_.min_samples && w.ewma_ms > options_.factor * ref;
    } else {
      slow = w.ewma_ms >= options_.clear_factor * ref;
    }
    const bool is_late = late[i] && !pause;
    changed |= slow != w.slow || is_late != w.late;
    w.slow = slow;
    w.late = is_late;
    if (!was && w.flagged()) ++w.times_flagged;
  }
  return changed;
}

}  // namespace hetps
