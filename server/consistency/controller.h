// ConsistencyController: *when* a worker may go on (ALGORITHMS.md §1-2). It lives on the
// server's network thread and sees every worker's CLOCK and PULL:
//  - a worker's Clock() returns only once TryStart() grants its next clock (the gate);
//  - a PULL is answered only once ReadReady() holds for the reader's clock, else it is parked;
//  - synchronous() controllers hold pushes and apply them when every live worker finished
//    their clock, one step per clock with the workers' updates summed in worker-id order.
// How updates combine is the aggregator's business, not this one's. Chosen by a spec string
// (--consistency=ssp:staleness=4) from the registry below; a new controller is one file with
// its Register function, one line in controllers.def, and its test.
//
// Thread-safety: none; owned by the server's network thread. Time is passed in (seconds on any
// monotonic origin), so tests drive it with a simulated clock.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/status.h"
#include "server/consistency/clock_table.h"
#include "server/round.h"

namespace hetps {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

class ConsistencyController {
 public:
  virtual ~ConsistencyController() = default;

  virtual std::string name() const = 0;
  virtual bool synchronous() const { return false; }

  // Worker `w` finished clock `completed` at time `now`.
  virtual void OnClock(int32_t w, int64_t completed, double /*now*/) {
    clocks_.Advance(w, completed);
  }
  // Whether `w` may start clock `next` now. Asked again for a parked worker after every change;
  // once granted for `next` it stays granted.
  virtual bool TryStart(int32_t w, int64_t next, double now) = 0;
  // Whether a read by `w` at its clock `clock` may be answered now. It must depend only on
  // `clock`, and hold for every clock below one it holds for: the aggregation tier answers a
  // worker's read at clock c with a reply given at any c' >= c (Policy.shared_reads).
  virtual bool ReadReady(int32_t w, int64_t clock) const = 0;
  // A dead or departed worker stops counting.
  virtual void RemoveWorker(int32_t w) { clocks_.Remove(w); }
  // A worker joins the running cluster (a restarted one under a new node id, or a new one):
  // it counts from now on, starting at the returned clock (ClockTable::JoinClock by default;
  // a controller with rounds may move it to its open round).
  virtual int64_t AddWorker(int32_t w) {
    const int64_t clock = clocks_.JoinClock();
    clocks_.Add(w, clock);
    return clock;
  }

  // Synchronous controllers close rounds; each is applied by every partition owner.
  using Round = RoundSpec;
  // Rounds closed since the last call, in order.
  virtual std::vector<Round> TakeRounds() { return {}; }
  // The clock a worker that finished `completed` continues at (backup: the open round).
  virtual int64_t ContinueAt(int32_t /*w*/, int64_t completed) const { return completed + 1; }
  // Whether a push tagged `clock` is still wanted (backup drops gradients of closed rounds).
  virtual bool Accepts(int64_t /*clock*/) const { return true; }
  // softsync: gradients per optimizer step (0: every push is applied on its own).
  virtual int64_t window() const { return 0; }
  // Called on every turn of the server loop (at least every 100 ms), for deadlines.
  virtual void Tick(double /*now*/) {}
  // The scheduler's view of the whole cluster (POLICY_HINT): the workers flagged as stragglers
  // now (backup:backups=auto waits for the others) and its automatic quorum, AutoQuorum
  // over the workers' iteration-time EWMAs (semi_async:quorum=auto takes it).
  virtual void OnHint(const std::vector<int32_t>& /*stragglers*/, int64_t /*quorum*/) {}
  // Federated rounds run by the scheduler (ROUND_CLOSE): round `round` closed with the uploads
  // of `kept` and the `late` uploads of earlier rounds, keeping unused uploads of the last
  // `late_rounds` rounds for later closes (selected takes it), or the uploads of `kept` under
  // `tasks` were committed (committed takes it; the others have no such rounds). `secure` and
  // `noise_std` are the close's RoundSpec fields.
  virtual void OnRoundClosed(int64_t /*round*/, const std::vector<int32_t>& /*kept*/,
                             const std::vector<int64_t>& /*tasks*/,
                             const std::vector<RoundSpec::Late>& /*late*/ = {},
                             int64_t /*late_rounds*/ = 0,
                             std::shared_ptr<const proto::SecureClose> /*secure*/ = nullptr,
                             double /*noise_std*/ = -1) {}

  const ClockTable& clocks() const { return clocks_; }
  // A request from worker `w` working on `clock` shows it finished every clock before: its
  // table entry rises to `clock` if lower. A no-op while the server saw every CLOCK; it is how
  // a server restarted in a running cluster (a fresh table) learns where the workers are.
  // Returns whether the entry rose.
  bool Observe(int32_t w, int64_t clock) {
    if (clock <= 0 || !clocks_.contains(w) || clocks_.clock(w) >= clock) return false;
    clocks_.Advance(w, clock - 1);
    return true;
  }
  // Takes over the clocks of the controller it replaces (live switch), or of a whole-run
  // checkpoint (every worker at the cut's clock). A controller that counts rounds moves its
  // first open round to the slowest clock: the ones below were closed by its predecessor.
  virtual void AdoptClocks(const ClockTable& clocks) { clocks_ = clocks; }

 protected:
  explicit ConsistencyController(const std::vector<int32_t>& workers) : clocks_(workers) {}
  ClockTable clocks_;
};

// How a controller's accepted pushes reach the partition's values. Aggregators declare which
// they support (aggregator.h), so a combination is either defined or refused.
enum class ApplySchedule {
  kOnArrival,        // each push goes to the aggregator as it arrives (asp, ssp, dssp)
  kWindowed,         // each push goes to the aggregator with a window of c per step (softsync)
  kLockstepRounds,   // held; each clock of every live worker is one round (bsp)
  kQuorumRounds,     // held; a round takes the first K workers' uploads (backup, semi_async)
  kScheduledRounds,  // held; the scheduler closes each round with the uploads it keeps (selected)
  kCommitted,        // held; each upload the scheduler commits goes on as on arrival (committed)
};
const char* ScheduleName(ApplySchedule schedule);
std::vector<ApplySchedule> EverySchedule();
// Whether the scheduler closes the rounds or uploads (kScheduledRounds, kCommitted): then only
// federated clients, which ask for work, can run under it.
bool SchedulerRunsRounds(ApplySchedule schedule);

struct ControllerEntry {
  std::function<std::unique_ptr<ConsistencyController>(const AlgorithmSpec&,
                                                       const std::vector<int32_t>& workers)>
      make;
  ApplySchedule schedule;
};
using ControllerRegistry = Registry<ControllerEntry>;
// Every controller (controllers.def).
const ControllerRegistry& Controllers();
// The controllers driven by the workers' clocks: all but those whose rounds or uploads the
// scheduler closes (selected, committed), which only federated edge clients can run.
std::vector<std::string> ClockDrivenControllers();

// Builds the controller of a validated spec over `workers` (all at clock 0).
std::unique_ptr<ConsistencyController> MakeController(const AlgorithmSpec& spec,
                                                      const std::vector<int32_t>& workers);
// Parses `spec` ("ssp:staleness=4") and builds its controller.
StatusOr<std::unique_ptr<ConsistencyController>> MakeController(
    const std::string& spec, const std::vector<int32_t>& workers);

#define HETPS_CONTROLLER(Name) void Register##Name(ControllerRegistry& r);
#include "server/consistency/controllers.def"
#undef HETPS_CONTROLLER

// DSSP's predictor (dssp.cc): extra iterations r in [0, r_max] for the fastest worker whose
// last push was at t_f with interval i_f, given the slowest's t_s and i_s.
int64_t DsspExtraIterations(double t_f, double i_f, double t_s, double i_s, int64_t r_max);

}  // namespace hetps
