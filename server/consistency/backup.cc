#include <algorithm>
#include <map>

#include "server/consistency/controller.h"

namespace hetps {
namespace {

// Synchronous SGD with backup workers (Chen et al. 2016; ALGORITHMS.md §7): of N + b workers,
// step k takes the gradients of the first N to finish clock k and averages them; the others'
// gradients for k are dropped, as is any gradient tagged with an already closed step. A worker
// may start step k + 1 once step k closed; a late one continues at the open step (like
// SyncReplicasOptimizer's global step). If workers die, the quorum shrinks to the live ones.
// b = -1 (auto) lets the scheduler choose: each step waits for every live worker it has not
// flagged as a straggler (POLICY_HINT), and for all of them until a hint came.
class Backup final : public ConsistencyController {
 public:
  Backup(const std::vector<int32_t>& workers, int64_t b)
      : ConsistencyController(workers), total_(static_cast<int64_t>(workers.size())), b_(b) {}
  std::string name() const override { return "backup"; }
  bool synchronous() const override { return true; }

  void OnClock(int32_t w, int64_t completed, double now) override {
    ConsistencyController::OnClock(w, completed, now);
    if (completed < open_) return;  // too late for its step
    auto& arrived = arrivals_[completed];
    if (std::find(arrived.begin(), arrived.end(), w) == arrived.end()) arrived.push_back(w);
    Close();
  }
  bool TryStart(int32_t, int64_t next, double) override { return next <= open_; }
  bool ReadReady(int32_t, int64_t clock) const override { return clock <= open_; }
  int64_t ContinueAt(int32_t, int64_t completed) const override {
    return std::max(completed + 1, open_);
  }
  bool Accepts(int64_t clock) const override { return clock >= open_; }
  void RemoveWorker(int32_t w) override {
    ConsistencyController::RemoveWorker(w);
    for (auto& [clock, arrived] : arrivals_) std::erase(arrived, w);
    Close();
  }
  // A joiner starts at the open step. Backups are spares: a joiner that restores the cluster
  // to its N + b workers changes no quorum; one beyond them raises N.
  int64_t AddWorker(int32_t w) override {
    clocks_.Add(w, std::max(clocks_.JoinClock(), open_));
    total_ = std::max(total_, static_cast<int64_t>(clocks_.all().size()));
    return clocks_.clock(w);
  }
  void AdoptClocks(const ClockTable& clocks) override {
    ConsistencyController::AdoptClocks(clocks);
    if (clocks_.min() != kUnbounded) open_ = std::max(open_, clocks_.min());
  }
  std::vector<Round> TakeRounds() override { return std::exchange(closed_, {}); }
  void OnHint(const std::vector<int32_t>& stragglers, int64_t) override {
    stragglers_ = stragglers;
    Close();
  }

 private:
  int64_t Quorum() const {
    const int64_t live = static_cast<int64_t>(clocks_.all().size());
    if (b_ < 0) {  // auto: every live worker but the flagged stragglers
      int64_t flagged = 0;
      for (int32_t w : stragglers_) flagged += clocks_.all().contains(w);
      return std::max<int64_t>(1, live - flagged);
    }
    return std::max<int64_t>(1, std::min(total_ - b_, live));
  }
  void Close() {
    while (true) {
      auto it = arrivals_.find(open_);
      if (it == arrivals_.end() || static_cast<int64_t>(it->second.size()) < Quorum()) return;
      it->second.resize(Quorum());  // the first N, in arrival order
      Round r;
      r.clock = open_;
      r.workers = it->second;
      r.only_clock = true;
      r.combine = Round::Combine::kMean;
      closed_.push_back(std::move(r));
      arrivals_.erase(arrivals_.begin(), std::next(it));
      ++open_;
    }
  }

  int64_t total_, b_;
  std::vector<int32_t> stragglers_;  // the scheduler's flags (b = auto)
  int64_t open_ = 0;                 // the step being collected; every step below it is closed
  std::map<int64_t, std::vector<int32_t>> arrivals_;
  std::vector<Round> closed_;
};

}  // namespace

void RegisterBackup(ControllerRegistry& r) {
  ParamDef backups = ParamDef::Int(
      "backups", "1", 0, 1e6,
      "b: each step applies the first N - b of N workers; auto: the scheduler's unflagged ones");
  backups.words = {"auto"};
  r.Add({"backup",
         "synchronous SGD with backup workers: each step averages the first N - b gradients and "
         "drops the late ones (Chen et al. 2016)",
         {backups}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<Backup>(workers,
                                           spec.Is("backups", "auto") ? -1 : spec.Int("backups"));
         },
         ApplySchedule::kQuorumRounds});
}

}  // namespace hetps
