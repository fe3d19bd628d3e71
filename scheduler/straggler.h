// StragglerDetector: tells a slow worker from a hung one from a healthy one, from the iteration
// times workers report (ALGORITHMS.md §7, the EWMA detector).
//
// Per worker: ewma <- beta * ewma + (1 - beta) * d and the same for the squared deviation, over
// its iteration times d (time outside Clock(): compute and I/O, never the consistency gate, so a
// fast worker held back by a slow one does not look slow). Two flags:
//  - slow: ewma > factor * reference, once the worker has min_samples iterations; it clears only
//    when ewma < clear_factor * reference (hysteresis: a worker at the threshold does not flap).
//  - late (missed deadline): the iteration under way has run for longer than its deadline,
//    max(deadline_factor * max(reference, own ewma), deadline_min_ms); it clears when an
//    iteration finishes. A hung worker keeps heartbeating but stays late, which is how a hang
//    differs from a death (silence). When half the workers or more are late at once (a
//    cluster-wide pause) nobody is.
// The reference is the median ewma of the measured workers; with only two, the other one's
// ewma (the median of two is their mean, which a straggler can never exceed by 2x or more).
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hetps {

struct StragglerOptions {
  double factor = 1.5;         // flag above this multiple of the reference
  double clear_factor = 1.25;  // a flagged worker clears below this multiple
  double beta = 0.5;           // EWMA memory
  int min_samples = 5;         // iterations before a worker can be called slow (warm-up)
  // An iteration is late past max(deadline_factor x max(reference, own ewma), deadline_min_ms):
  // a hang lasts seconds, while a loaded machine delays millisecond iterations by several x.
  double deadline_factor = 4;
  double deadline_min_ms = 1000;
};

class StragglerDetector {
 public:
  struct Worker {
    double ewma_ms = -1;  // -1: no iteration yet
    double var_ms2 = 0;
    int64_t iterations = 0;
    double busy_ms = 0;  // the iteration under way so far
    bool slow = false;
    bool late = false;
    int64_t times_flagged = 0;  // transitions from clear to flagged
    bool flagged() const { return slow || late; }
  };

  explicit StragglerDetector(StragglerOptions options = {}) : options_(options) {}

  void AddWorker(int32_t id) { workers_.try_emplace(id); }
  void RemoveWorker(int32_t id) { workers_.erase(id); }
  // A finished iteration of `ms`.
  void OnIteration(int32_t id, double ms);
  // How long the iteration under way has run (0 while the worker waits in Clock()).
  void SetBusy(int32_t id, double ms);
  // Recomputes every flag; true when any changed.
  bool Update();

  const std::map<int32_t, Worker>& workers() const { return workers_; }
  std::vector<int32_t> Flagged() const;
  // Why `id` is flagged: "slow", "late", "slow, late" or "".
  std::string Reason(int32_t id) const;
  // What `id`'s ewma is compared with: the median ewma of the measured workers, or with two of
  // them the other's (-1 while there is nothing to compare with).
  double Reference(int32_t id) const;

 private:
  double MedianOfAll() const;  // of the measured workers' ewma; -1 with fewer than three
  double ReferenceGiven(int32_t id, double median_of_all) const;

  StragglerOptions options_;
  std::map<int32_t, Worker> workers_;
};

}  // namespace hetps
