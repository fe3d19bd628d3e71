#include <algorithm>
#include <utility>

#include "server/consistency/controller.h"

namespace hetps {
namespace {

// Asynchronous federated learning run by the scheduler (scheduler/fed_rounds.h with
// --concurrency): at most C clients train at once, each on a task the scheduler numbered, and
// a client's pushes are held under that task (the push's clock) until the scheduler commits
// the upload (the client reported every push of it acknowledged). A commit hands the task's
// updates to the aggregator one by one, as if they arrived then: fedasync mixes each in with
// its staleness (versions applied since the client's pull), fedbuff buffers K of them. An upload
// the scheduler gives up on (its client failed, left or went quiet past the deadline) is
// dropped whole, so no part of an unfinished upload is ever applied. With the scheduler's
// --quorum=K > 1 (FedSA) it commits groups of K uploads instead: each group is one step on the
// mean of its deltas weighted by samples * (1 + staleness)^-a, through the server optimizer
// (with sgd:lr=1 and fresh uploads, the sample-weighted mean of the local models); the
// aggregator's own per-upload rule is not used for a group. Under --secure_aggregation the
// scheduler commits cohorts instead (FedBuff's buffer as one secure round, numbered as one
// task): the cohort's masked uploads, summed and unmasked, are one step on their weighted mean
// times the mean of their (1 + staleness)^-a (PartitionState::ApplySecure).
class Committed final : public ConsistencyController {
 public:
  Committed(const AlgorithmSpec& spec, const std::vector<int32_t>& workers)
      : ConsistencyController(workers), exponent_(spec.Number("exponent")) {}
  std::string name() const override { return "committed"; }
  bool synchronous() const override { return true; }  // held until the commit
  bool TryStart(int32_t, int64_t, double) override { return true; }
  bool ReadReady(int32_t, int64_t) const override { return true; }
  void OnRoundClosed(int64_t round, const std::vector<int32_t>& committed,
                     const std::vector<int64_t>& tasks, const std::vector<Round::Late>& /*late*/,
                     int64_t /*late_rounds*/, std::shared_ptr<const proto::SecureClose> secure,
                     double /*noise_std*/) override {
    Round r;
    if (secure) {  // a secure cohort (FedBuff's buffer): one step on its unmasked sum
      r.clock = round;
      r.workers = committed;
      r.per_push = true;  // the other cohorts' clocks stay held
      r.secure = std::move(secure);
      r.staleness_exponent = exponent_;
    } else if (tasks.size() <= 1) {  // one upload (or none: its task is given up) as on arrival
      r.clock = tasks.empty() ? round : tasks[0];
      r.workers = committed;
      r.per_push = true;
    } else {  // a FedSA round: one step on the group, weighted by samples and staleness
      r.clock = *std::max_element(tasks.begin(), tasks.end());
      r.workers = committed;
      std::sort(r.workers.begin(), r.workers.end());
      r.one_step = true;
      r.combine = Round::Combine::kWeighted;
      r.staleness_exponent = exponent_;
    }
    closed_.push_back(std::move(r));
  }
  std::vector<Round> TakeRounds() override { return std::exchange(closed_, {}); }

 private:
  double exponent_;
  std::vector<Round> closed_;
};

}  // namespace

void RegisterCommitted(ControllerRegistry& r) {
  r.Add({"committed",
         "asynchronous federated uploads run by the scheduler (--concurrency): each upload the "
         "scheduler commits goes to the aggregator whole, as on arrival (fedasync, fedbuff); "
         "unfinished uploads are dropped; with the scheduler's --quorum=K a group of K is one "
         "step weighted by samples * (1 + staleness)^-a (FedSA, Ma et al., JSAC'21)",
         {ParamDef::Real("exponent", "0.5", 0, 100,
                         "a in (1 + staleness)^-a for grouped uploads (--quorum > 1)")}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<Committed>(spec, workers);
         },
         ApplySchedule::kCommitted});
}

}  // namespace hetps
