#include "worker/edge/edge_profile.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "worker/link_table.h"

namespace hetps {
namespace {

bool Evaluator(const EdgeProfileFlags& f, int rank) { return rank >= 0 && rank < f.evaluators; }

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
  return Status();
}

double EdgeSlowdown(const EdgeProfileFlags& f, int rank) {
  if (Evaluator(f, rank)) return 1.0;
  return f.slowdown * SpreadFactor(f.device_spread, f.data_seed, 1, true, rank);
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
