#include <algorithm>

#include "server/consistency/controller.h"

namespace hetps {
namespace {

// Federated rounds run by the scheduler (scheduler/fed_rounds.h, --clients_per_round): a
// client works on round r only once the scheduler selected it for r, so nothing here waits
// on clocks. Pushes are held by their round (the push's clock) until the scheduler closes the
// round with the clients whose uploads it keeps (ROUND_CLOSE: the first K of those selected,
// or whoever made the deadline): their updates of that round become one step weighted by
// their sample counts (fedavg: the sample-weighted mean), and every other upload of that
// round or an earlier one is dropped, so a straggler's late upload is never applied, unless
// the scheduler accepts late results (--late_rounds L, FedLesScan): then the unused uploads of
// the last L rounds wait, and a later close names those it takes, each weighted by
// (its round + 1) / (the closing round + 1) within that close's step.
class Selected final : public ConsistencyController {
 public:
  explicit Selected(const std::vector<int32_t>& workers) : ConsistencyController(workers) {}
  std::string name() const override { return "selected"; }
  bool synchronous() const override { return true; }
  bool TryStart(int32_t, int64_t, double) override { return true; }
  bool ReadReady(int32_t, int64_t) const override { return true; }
  void OnRoundClosed(int64_t round, const std::vector<int32_t>& kept,
                     const std::vector<int64_t>& /*tasks*/, const std::vector<Round::Late>& late,
                     int64_t late_rounds, std::shared_ptr<const proto::SecureClose> secure,
                     double noise_std) override {
    // Nothing to apply: the round's uploads go with the next close.
    if (kept.empty() && late.empty()) return;
    Round r;
    r.clock = round;
    r.workers = kept;  // in the scheduler's order, which the step sums in
    r.only_clock = true;
    r.one_step = true;
    r.combine = Round::Combine::kWeighted;
    r.late = late;
    r.secure = std::move(secure);
    r.noise_std = noise_std;
    if (late_rounds > 0) r.keep_from = round + 1 - late_rounds;
    // Late uploads only: no upload of `round` counts (no worker has id -1; an empty list would
    // mean everyone's).
    if (r.workers.empty()) r.workers = {-1};
    closed_.push_back(std::move(r));
  }
  std::vector<Round> TakeRounds() override { return std::exchange(closed_, {}); }

 private:
  std::vector<Round> closed_;
};

}  // namespace

void RegisterSelected(ControllerRegistry& r) {
  r.Add({"selected",
         "federated rounds run by the scheduler (--clients_per_round): each round one step on "
         "the sample-weighted uploads of the clients it kept; late uploads are dropped, or taken "
         "by a later round when the scheduler accepts them (--late_rounds)",
         {}},
        {[](const AlgorithmSpec&, const std::vector<int32_t>& workers) {
           return std::make_unique<Selected>(workers);
         },
         ApplySchedule::kScheduledRounds});
}

}  // namespace hetps
