#include "server/consistency/controller.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hetps {

std::vector<std::string> ControllerNames() {
  return {"asp", "backup", "bsp", "dssp", "semi_async", "softsync", "ssp"};
}

std::string Describe(const proto::Policy& p) {
  if (p.consistency() == "ssp") return fmt::format("ssp(s={})", p.staleness());
  if (p.consistency() == "dssp") {
    return fmt::format("dssp(s_L={}, r_max={})", p.dssp_lower(), p.dssp_range());
  }
  if (p.consistency() == "backup") {
    return p.backup_workers() < 0 ? "backup(b=auto)"
                                  : fmt::format("backup(b={})", p.backup_workers());
  }
  if (p.consistency() == "softsync") return fmt::format("softsync(n={})", p.softsync_n());
  if (p.consistency() == "semi_async") {
    return p.quorum() > 0 ? fmt::format("semi_async(K={})", p.quorum()) : "semi_async(K=auto)";
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
  if (name == "backup") {
    if (p.backup_workers() < -1) {
      return Status::InvalidArgument(
          fmt::format("backup_workers must be >= 0 (or -1: auto), got {}", p.backup_workers()));
    }
    return MakeBackup(workers, p.backup_workers());
  }
  if (name == "softsync") {
    if (p.softsync_n() < 1) {
      return Status::InvalidArgument(
          fmt::format("softsync_n must be >= 1, got {}", p.softsync_n()));
    }
    return MakeSoftsync(workers, p.softsync_n());
  }
  if (name == "semi_async") {
    if (p.quorum() < 0 || p.staleness_exponent() < 0) {
      return Status::InvalidArgument("quorum (0 = auto) and staleness_exponent must be >= 0");
    }
    if (p.round_timeout_ms() < 1) return Status::InvalidArgument("round_timeout_ms must be >= 1");
    return MakeSemiAsync(workers, p.quorum(), p.staleness_exponent(),
                         static_cast<double>(p.round_timeout_ms()) / 1000.0);
  }
  return Status::InvalidArgument(fmt::format("unknown consistency '{}' (known: {})", name,
                                             fmt::join(ControllerNames(), ", ")));
}

}  // namespace hetps
