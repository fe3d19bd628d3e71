#include <algorithm>

#include "server/consistency/controller.h"

namespace hetps {
namespace {

// n-softsync (Zhang, Gupta, Lian, Liu, IJCAI'16; ALGORITHMS.md §3): with lambda learners, every
// partition takes c = floor(lambda / n) gradients from any senders and applies
// (1/c) * sum alpha0/sigma_l * g_l as one step (the partition's aggregator does the windowing).
// Nobody waits: n = lambda is plain ASGD with alpha0/sigma, n = 1 collects lambda gradients.
class Softsync final : public ConsistencyController {
 public:
  Softsync(const std::vector<int32_t>& workers, int64_t n)
      : ConsistencyController(workers), n_(n) {}
  std::string name() const override { return "softsync"; }
  bool TryStart(int32_t, int64_t, double) override { return true; }
  bool ReadReady(int32_t, int64_t) const override { return true; }
  int64_t window() const override {
    const int64_t learners = static_cast<int64_t>(clocks_.all().size());
    return std::max<int64_t>(1, learners / n_);
  }

 private:
  int64_t n_;
};

}  // namespace

void RegisterSoftsync(ControllerRegistry& r) {
  r.Add({"softsync",
         "n-softsync: never waits; one step per floor(workers / n) gradients, each scaled by "
         "alpha0 / staleness (Zhang et al., IJCAI'16)",
         {ParamDef::Int("n", "1", 1, 1e6, "n: a step takes floor(workers / n) gradients")}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<Softsync>(workers, spec.Int("n"));
         },
         ApplySchedule::kWindowed});
}

}  // namespace hetps
