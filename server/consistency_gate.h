// ConsistencyGate: the server's side of the consistency controller (server/consistency/). It
// decides, on the network thread, what happens to each worker request that passed
// validation: a PUSH too late for its round is dropped, a PULL whose reader is too far ahead
// is parked until the slowest catch up, a CLOCK is answered only once the worker's next clock
// may start, and pushes are marked to be held for their round or applied in windows. Closed
// rounds are handed to the partition owners. The controller can be switched while running
// (Switch), losing nothing held.
//
// Virtual time (docs/virtual-time.md): requests of data-centre workers in virtual time carry
// the virtual time of their turn; the scheduler grants one turn at a time, in virtual-time
// order. The gate then runs its controller on the virtual time of the latest request (deadlines
// fire when a request past them arrives), tells a worker at once when its PULL or CLOCK is
// parked (PARKED: the turn can end while it waits), answers a parked request with the virtual
// time of the request that released it, and names in that request's CLOCK reply (or PARKED
// notice) the workers it released, for the scheduler.
//
// Thread-safety: none; owned by the server's network thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/message.h"
#include "common/registry.h"
#include "server/consistency/controller.h"
#include "server/serving.h"

namespace hetps {

class ConsistencyGate {
 public:
  // How the gate acts on the server.
  struct Actions {
    std::function<void(const std::string& identity, const proto::Header& reply)> reply;
    std::function<void(DataRequest&& request)> serve;         // to the partition's owner
    std::function<void(const RoundSpec& round)> apply_round;  // by every partition owner
    std::function<double()> now;  // seconds on a monotonic clock (tests pass their own)
  };
  // `consistency` and `aggregator` are parsed specs whose combination was checked.
  ConsistencyGate(AlgorithmSpec consistency, AlgorithmSpec aggregator, Actions actions);
  ConsistencyGate(const ConsistencyGate&) = delete;
  ConsistencyGate& operator=(const ConsistencyGate&) = delete;

  // Builds the controller over the cluster's workers, all at `start_clock` (0; a run resumed
  // from a whole-run checkpoint starts at the checkpoint's clock).
  void Start(const std::vector<int32_t>& workers, int64_t start_clock = 0);
  bool started() const { return controller_ != nullptr; }

  // At most `limit` requests of one worker wait here at once (parked reads and clocks); one
  // more is answered UNAVAILABLE at once, so a worker cannot grow the server's memory, or the
  // work of every release, without bound. The server sets it from its shard map.
  void SetParkedLimit(int64_t limit) { parked_limit_ = limit; }

  // A validated PUSH, PULL or INIT: dropped, parked or served. REQUIRES: started().
  void Admit(Envelope& env);
  // A worker's CLOCK_SYNC: where it is, for a gate that started over (nothing is answered).
  void Observe(const proto::Header& h);
  // A worker's CLOCK: answered once its next clock may start. REQUIRES: started().
  void OnClock(Envelope& env);
  // Deadlines (semi_async rounds); call on every turn of the loop.
  void Tick();
  // A dead or departed worker stops counting.
  void RemoveWorker(int32_t worker, const char* why);
  // A worker that joined the running cluster counts from now on; returns the clock it starts
  // at. REQUIRES: started().
  int64_t AddWorker(int32_t worker);
  // The scheduler's straggler flags and quorum.
  void OnHint(const std::vector<int32_t>& stragglers, int64_t quorum);
  // The scheduler closed federated round `round` with the uploads of `kept` (ROUND_CLOSE).
  void OnRoundClosed(int64_t round, const std::vector<int32_t>& kept,
                     const std::vector<int64_t>& tasks, const std::vector<RoundSpec::Late>& late,
                     int64_t late_rounds,
                     std::shared_ptr<const proto::SecureClose> secure = nullptr,
                     double noise_std = -1);
  // Switches to the controller of `spec`; refused (nothing changes) when the spec is invalid
  // or the aggregator is not defined under it.
  Status Switch(const std::string& spec);

  // The slowest live worker's clock (kUnbounded when none is left). REQUIRES: started().
  int64_t slowest_clock() const { return controller_->clocks().min(); }
  // For reports: the running spec with every parameter, parked requests, dropped pushes.
  std::string consistency() const { return consistency_.Full(); }
  const AlgorithmSpec& consistency_spec() const { return consistency_; }
  const AlgorithmSpec& aggregator_spec() const { return aggregator_; }
  // Whether the scheduler closes this controller's rounds (Policy.scheduler_rounds).
  bool scheduler_rounds() const {
    return SchedulerRunsRounds(Controllers().EntryFor(consistency_.name()).schedule);
  }
  // Whether the controller holds pushes for rounds (Policy.synchronous).
  bool synchronous() const {
    const ApplySchedule s = Controllers().EntryFor(consistency_.name()).schedule;
    return s != ApplySchedule::kOnArrival && s != ApplySchedule::kWindowed;
  }
  // Whether an aggregator's sums of pushes stand for the pushes under this controller and
  // aggregator (Policy.summed_pushes): applied on arrival or summed per clock (bsp), by an
  // aggregator that says so for its parameters.
  bool summed_pushes() const {
    const ApplySchedule s = Controllers().EntryFor(consistency_.name()).schedule;
    const AggregatorEntry& a = Aggregators().EntryFor(aggregator_.name());
    return (s == ApplySchedule::kOnArrival || s == ApplySchedule::kLockstepRounds) &&
           a.presummable && a.presummable(aggregator_);
  }
  int64_t parked_reads() const { return static_cast<int64_t>(parked_reads_.size()); }
  int64_t parked_clocks() const { return static_cast<int64_t>(parked_clocks_.size()); }
  int64_t dropped() const { return dropped_; }

 private:
  void Serve(Envelope& env);  // with the gate's marks
  // Answers parked clocks and reads that may go on now; the workers they belong to join
  // released_. A grant of the clock `keep` (a virtual CLOCK being handled: its sender and
  // request id) goes to kept_ instead of being sent.
  void Release(const proto::Header* keep = nullptr);
  // The time the controller runs on: the latest request's virtual time under virtual time.
  double Now() const { return virtual_ ? virtual_now_ : actions_.now(); }
  // A request's virtual time moves the gate's forward (and fires what is due by then).
  void See(const proto::Header& h);
  // Answers a virtual request that stays parked: PARKED, with the workers released meanwhile.
  void NoticeParked(const std::string& identity, const proto::Header& request);
  void CompleteRounds();  // hands closed rounds to the owners
  int64_t MinClock(int64_t fallback) const;

  AlgorithmSpec consistency_, aggregator_;
  Actions actions_;
  std::unique_ptr<ConsistencyController> controller_;
  std::deque<Envelope> parked_clocks_, parked_reads_;
  std::unordered_map<int32_t, int64_t> parked_by_;  // requests waiting, by worker
  int64_t parked_limit_ = 4096;
  // Answers UNAVAILABLE and returns true when the sender of `env` is at its limit.
  bool ParkedFull(const Envelope& env);
  void Park(std::deque<Envelope>& queue, Envelope& env);
  void Unparked(int32_t worker);
  int64_t dropped_ = 0;   // pushes too late for their round (backup)
  bool virtual_ = false;  // a request carried a virtual time
  double virtual_now_ = 0;
  std::vector<int32_t> released_;      // by Release, for the virtual CLOCK being handled
  std::optional<proto::Header> kept_;  // that CLOCK's grant, sent with released_
};

}  // namespace hetps
