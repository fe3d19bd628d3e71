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

// One worker's timing and flags; the caller keeps it with the rest of what it knows about the
// worker (ClusterStats: one table of workers).
struct StragglerState {
  double ewma_ms = -1;  // -1: no iteration yet
  double var_ms2 = 0;
  int64_t iterations = 0;
  double busy_ms = 0;  // the iteration under way so far
  bool slow = false;
  bool late = false;
  int64_t times_flagged = 0;  // transitions from clear to flagged
  bool flagged() const { return slow || late; }
  // Why it is flagged: "slow", "late", "slow, late" or "".
  std::string Reason() const;
};

// The rules over a set of workers' StragglerStates; holds no per-worker state itself.
class StragglerDetector {
 public:
  // The live workers, compared with each other.
  using Workers = std::vector<StragglerState*>;
  using ConstWorkers = std::vector<const StragglerState*>;

  explicit StragglerDetector(StragglerOptions options = {}) : options_(options) {}

  // A finished iteration of `ms`.
  void OnIteration(StragglerState& w, double ms) const;
  // How long the iteration under way has run (0 while the worker waits in Clock()).
  static void SetBusy(StragglerState& w, double ms);
  // Recomputes the flags of every worker in `workers`; true when any changed.
  bool Update(const Workers& workers) const;
  // What w's ewma is compared with: the median ewma of the measured `workers`, or with two of
  // them the other's (-1 while there is nothing to compare with).
  static double Reference(const StragglerState& w, const ConstWorkers& workers);

 private:
  static double MedianOfAll(const ConstWorkers& workers);  // -1 with fewer than three measured
  static double ReferenceGiven(const StragglerState& w, const ConstWorkers& workers, double median);

  StragglerOptions options_;
};

}  // namespace hetps
