#include "worker/edge/edge_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <random>

#include "worker/edge/device_table.h"
#include "worker/link_table.h"

namespace hetps {
namespace {

bool Evaluator(const EdgeProfileFlags& f, int rank) { return rank >= 0 && rank < f.evaluators; }

// The device table at `path`, read once per process (empty when it cannot be read: the flags'
// validation says why).
std::vector<DeviceKind> Devices(const std::string& path) {
  if (path.empty()) return {};
  static std::mutex mu;
  static std::map<std::string, std::vector<DeviceKind>> read;
  std::lock_guard lock(mu);
  auto it = read.find(path);
  if (it == read.end()) {
    auto t = ReadDeviceTable(path);
    it = read.emplace(path, t.ok() ? std::move(*t) : std::vector<DeviceKind>{}).first;
  }
  return it->second;
}

}  // namespace

double SpreadFactor(double spread, uint64_t seed, uint64_t what, bool at_least_one, int rank) {
  if (spread <= 0) return 1.0;
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(std::max(0, rank)) * 31 + what);
  const double z = std::normal_distribution<double>(0, 1)(rng);
  return std::exp(spread * (at_least_one ? std::abs(z) : z));
}

Status ValidateEdgeProfileFlags(const EdgeProfileFlags& f) {
  if (!(f.slowdown >= 1)) return Status::InvalidArgument("slowdown must be >= 1");
  if (!(f.device_spread >= 0) || !(f.link_spread >= 0)) {
    return Status::InvalidArgument("device_spread and link_spread must be >= 0");
  }
  if (f.links != "transport" && f.links != "netns") {
    return Status::InvalidArgument("--links must be transport or netns, got '" + f.links + "'");
  }
  if (f.evaluators < 0) return Status::InvalidArgument("evaluators must be >= 0");
  if (!f.link_table.empty()) {
    if (auto table = ReadLinkTable(f.link_table); !table.ok()) return table.status();
  }
  if (!(f.device_gflops > 0)) return Status::InvalidArgument("--device_gflops must be > 0");
  if (!f.device_table.empty()) {
    if (auto table = ReadDeviceTable(f.device_table); !table.ok()) return table.status();
    if (f.device_gflops != 1) {
      return Status::InvalidArgument(
          "--device_table gives each client's rate (its fastest row is the reference device): "
          "leave --device_gflops unset");
    }
  }
  return Status();
}

double EdgeSlowdown(const EdgeProfileFlags& f, int rank) {
  if (Evaluator(f, rank)) return 1.0;
  double device = 1.0;
  if (const std::vector<DeviceKind> table = Devices(f.device_table); !table.empty()) {
    device = ReferenceGflops(table) / DrawDevice(table, f.data_seed, std::max(0, rank)).gflops;
  }
  return f.slowdown * device * SpreadFactor(f.device_spread, f.data_seed, 1, true, rank);
}

double EdgeReferenceGflops(const EdgeProfileFlags& f) {
  const std::vector<DeviceKind> table = Devices(f.device_table);
  return table.empty() ? f.device_gflops : ReferenceGflops(table);
}

std::string EdgeDeviceName(const EdgeProfileFlags& f, int rank) {
  const std::vector<DeviceKind> table = Devices(f.device_table);
  if (Evaluator(f, rank) || table.empty()) return "";
  return DrawDevice(table, f.data_seed, std::max(0, rank)).name;
}

StatusOr<LinkOptions> EdgeLink(const EdgeProfileFlags& f, int rank) {
  LinkOptions o;
  if (Evaluator(f, rank)) return o;
  o.up_mbps = f.link_up_mbps;
  o.down_mbps = f.link_down_mbps;
  o.latency_ms = f.link_latency_ms;
  o.jitter_ms = f.link_jitter_ms;
  o.loss = f.link_loss;
  if (!f.link_table.empty()) {
    auto table = ReadLinkTable(f.link_table);
    if (!table.ok()) return table.status();
    const LinkKind& kind = DrawLink(*table, f.link_seed, std::max(0, rank));
    o.up_mbps = kind.link.up_mbps;
    o.down_mbps = kind.link.down_mbps;
    o.latency_ms = kind.link.latency_ms;
    o.jitter_ms = kind.link.jitter_ms;
    o.loss = kind.link.loss;
  }
  const double spread = SpreadFactor(f.link_spread, f.link_seed, 2, false, rank);
  o.up_mbps *= spread;
  o.down_mbps *= spread;
  o.rto_ms = f.link_rto_ms;
  o.seed = f.link_seed * 1000003 + static_cast<uint64_t>(std::max(0, rank));
  o.outside = f.links == "netns";
  return o;
}

}  // namespace hetps
