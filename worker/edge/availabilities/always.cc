// always: online throughout the run.
#include "worker/edge/availability.h"

namespace hetps {
namespace {

class Always final : public Availability {
 public:
  double NextOnline(double t) override { return t; }
  bool OnlineThroughout(double, double) override { return true; }
};

}  // namespace

void RegisterAlwaysAvailable(AvailabilityRegistry& r) {
  r.Add({"always", "online throughout the run", {}},
        {[](const AlgorithmSpec&,
            const AvailabilityContext&) -> StatusOr<std::unique_ptr<Availability>> {
          return std::unique_ptr<Availability>(std::make_unique<Always>());
        }});
}

}  // namespace hetps
