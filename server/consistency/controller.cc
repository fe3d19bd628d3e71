#include "server/consistency/controller.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hetps {

std::vector<std::string> ControllerNames() { return {"asp", "bsp", "dssp", "ssp"}; }

std::string Describe(const proto::Policy& p) {
  if (p.consistency() == "ssp") return fmt::format("ssp(s={})", p.staleness());
  if (p.consistency() == "dssp") {
    return fmt::format("dssp(s_L={}, r_max={})", p.dssp_lower(), p.dssp_range());
  }
  return p.consistency();
}

StatusOr<std::unique_ptr<ConsistencyController>> MakeController(
    const proto::Policy& p, const std::vector<int32_t>& workers) {
  const std::string& name = p.consistency();
  if (name == "asp") return MakeAsp(workers);
  if (name == "bsp") return MakeSsp(workers, 0, /*synchronous=*/true);
  if (name == "ssp") {
    if (p.staleness() < 0) {
      return Status::InvalidArgument(fmt::format("staleness must be >= 0, got {}", p.staleness()));
    }
    return MakeSsp(workers, p.staleness(), /*synchronous=*/false);
  }
  if (name == "dssp") {
    if (p.dssp_lower() < 0 || p.dssp_range() < 0) {
      return Status::InvalidArgument(fmt::format(
          "dssp_lower and dssp_range must be >= 0, got {} and {}", p.dssp_lower(), p.dssp_range()));
    }
    return MakeDssp(workers, p.dssp_lower(), p.dssp_range());
  }
  return Status::InvalidArgument(fmt::format("unknown consistency '{}' (known: {})", name,
                                             fmt::join(ControllerNames(), ", ")));
}

}  // namespace hetps
