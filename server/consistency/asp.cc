#include "server/consistency/controller.h"

namespace hetps {
namespace {

// Asynchronous parallel: never waits (ALGORITHMS.md §1, s = infinity).
class Asp final : public ConsistencyController {
 public:
  explicit Asp(const std::vector<int32_t>& workers) : ConsistencyController(workers) {}
  std::string name() const override { return "asp"; }
  bool TryStart(int32_t, int64_t, double) override { return true; }
  bool ReadReady(int32_t, int64_t) const override { return true; }
};

}  // namespace

void RegisterAsp(ControllerRegistry& r) {
  r.Add({"asp", "asynchronous parallel: never waits; every push applied on arrival", {}},
        {[](const AlgorithmSpec&, const std::vector<int32_t>& workers) {
           return std::make_unique<Asp>(workers);
         },
         ApplySchedule::kOnArrival});
}

}  // namespace hetps
