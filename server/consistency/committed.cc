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
// dropped whole, so no part of an unfinished upload is ever applied.
class Committed final : public ConsistencyController {
 public:
  explicit Committed(const std::vector<int32_t>& workers) : ConsistencyController(workers) {}
  std::string name() const override { return "committed"; }
  bool synchronous() const override { return true; }  // held until the commit
  bool TryStart(int32_t, int64_t, double) override { return true; }
  bool ReadReady(int32_t, int64_t) const override { return true; }
  void OnRoundClosed(int64_t task, const std::vector<int32_t>& committed) override {
    Round r;
    r.clock = task;
    r.workers = committed;  // empty: the task is given up, its updates dropped
    r.per_push = true;
    closed_.push_back(std::move(r));
  }
  std::vector<Round> TakeRounds() override { return std::exchange(closed_, {}); }

 private:
  std::vector<Round> closed_;
};

}  // namespace

void RegisterCommitted(ControllerRegistry& r) {
  r.Add({"committed",
         "asynchronous federated uploads run by the scheduler (--concurrency): each upload the "
         "scheduler commits goes to the aggregator whole, as on arrival (fedasync, fedbuff); "
         "unfinished uploads are dropped",
         {}},
        {[](const AlgorithmSpec&, const std::vector<int32_t>& workers) {
           return std::make_unique<Committed>(workers);
         },
         ApplySchedule::kCommitted});
}

}  // namespace hetps
