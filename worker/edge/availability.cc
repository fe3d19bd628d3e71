#include "worker/edge/availability.h"

namespace hetps {

const AvailabilityRegistry& Availabilities() {
  static const AvailabilityRegistry* r = [] {
    auto* r = new AvailabilityRegistry("availability");
#define HETPS_AVAILABILITY(Name) Register##Name(*r);
#include "worker/edge/availabilities/availabilities.def"
#undef HETPS_AVAILABILITY
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<Availability>> MakeAvailability(const std::string& text, uint64_t seed,
                                                         int client) {
  auto spec = Availabilities().Parse(text);
  if (!spec.ok()) return spec.status();
  return Availabilities().EntryFor(spec->name()).make(*spec, {.seed = seed, .client = client});
}

}  // namespace hetps
