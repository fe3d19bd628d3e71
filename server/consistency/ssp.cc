#include <algorithm>

#include "server/consistency/controller.h"

namespace hetps {
namespace {

// Stale synchronous parallel (ALGORITHMS.md §1): a worker may start clock c only while
// c - min_clock <= s, and a read at clock c needs min_clock >= c - s, i.e. it reflects every
// update tagged <= c - s - 1 from every live worker. BSP is s = 0 with updates held and applied
// once per clock, which makes it exactly sequential mini-batch SGD over all workers' batches.
class Ssp final : public ConsistencyController {
 public:
  Ssp(const std::vector<int32_t>& workers, int64_t s, bool synchronous)
      : ConsistencyController(workers), s_(s), synchronous_(synchronous) {}
  std::string name() const override { return synchronous_ ? "bsp" : "ssp"; }
  bool synchronous() const override { return synchronous_; }
  bool TryStart(int32_t, int64_t next, double) override { return next - clocks_.min() <= s_; }
  bool ReadReady(int32_t, int64_t clock) const override { return clocks_.min() >= clock - s_; }
  // BSP: once every worker was gone every held round was applied (completed_ ran to the end);
  // rounds count again from where the joiner starts.
  int64_t AddWorker(int32_t w) override {
    const int64_t clock = ConsistencyController::AddWorker(w);
    completed_ = std::min(completed_, clock);
    return clock;
  }

  void AdoptClocks(const ClockTable& clocks) override {
    ConsistencyController::AdoptClocks(clocks);
    if (clocks_.min() != kUnbounded) completed_ = std::max(completed_, clocks_.min());
  }
  // BSP: every clock below the slowest worker's is complete; each is one summed step.
  std::vector<Round> TakeRounds() override {
    const int64_t slowest = clocks_.min();  // kUnbounded once no worker is left
    if (!synchronous_ || slowest <= completed_) return {};
    completed_ = slowest;
    Round r;
    r.clock = slowest - 1;
    return {r};
  }

 private:
  int64_t s_;
  bool synchronous_;
  int64_t completed_ = 0;
};

}  // namespace

// bsp is ssp at s = 0 with each clock's pushes held and applied as one summed step, so both
// register here.
void RegisterSsp(ControllerRegistry& r) {
  r.Add({"ssp",
         "stale synchronous parallel: a worker starts clock c only while c - slowest <= s, and "
         "a read at c waits for the slowest to finish c - s (Ho et al., NIPS'13)",
         {ParamDef::Int("staleness", "2", 0, 1e9, "clocks s a worker may run ahead")}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<Ssp>(workers, spec.Int("staleness"), false);
         },
         ApplySchedule::kOnArrival});
  r.Add({"bsp",
         "bulk synchronous parallel: a barrier every clock, its pushes summed into one step "
         "(exactly sequential mini-batch SGD)",
         {}},
        {[](const AlgorithmSpec&, const std::vector<int32_t>& workers) {
           return std::make_unique<Ssp>(workers, 0, true);
         },
         ApplySchedule::kLockstepRounds});
}

}  // namespace hetps
