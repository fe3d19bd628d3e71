#include "scheduler/ratio/ratio.h"

#include <algorithm>
#include <cmath>

namespace hetps {

#define HETPS_RATIO(Name) void Register##Name(RatioRegistry& r);
#include "scheduler/ratio/ratios.def"
#undef HETPS_RATIO

int UploadsFor(double alpha, int clients) {
  const int k = static_cast<int>(std::ceil(alpha * clients - 1e-9));
  return std::clamp(k, 1, std::max(1, clients));
}

const RatioRegistry& RatioPolicies() {
  static const RatioRegistry* r = [] {
    auto* r = new RatioRegistry("ratio");
#define HETPS_RATIO(Name) Register##Name(*r);
#include "scheduler/ratio/ratios.def"
#undef HETPS_RATIO
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<RatioPolicy>> MakeRatioPolicy(const std::string& text) {
  auto spec = RatioPolicies().Parse(text);
  if (!spec.ok()) return spec.status();
  return RatioPolicies().EntryFor(spec->name()).make(*spec);
}

}  // namespace hetps
