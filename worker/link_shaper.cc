#include "worker/link_shaper.h"

#include <algorithm>

namespace hetps {

Status ValidateLinkOptions(const LinkOptions& o) {
  if (!(o.up_mbps >= 0) || !(o.down_mbps >= 0) || !(o.latency_ms >= 0) || !(o.jitter_ms >= 0) ||
      !(o.rto_ms >= 0)) {
    return Status::InvalidArgument("link bandwidths, latency, jitter and rto must be >= 0");
  }
  if (!(o.loss >= 0 && o.loss < 1)) return Status::InvalidArgument("link loss must be in [0, 1)");
  return Status();
}

LinkShaper::LinkShaper(const LinkOptions& options) : o_(options), rng_(options.seed) {
  up_.bits_per_s = o_.up_mbps * 1e6;
  down_.bits_per_s = o_.down_mbps * 1e6;
}

double LinkShaper::Through(Direction& d, size_t bytes, double now) {
  const double start = std::max(now, d.free_at);
  const size_t packets = std::max<size_t>(1, (bytes + kPacketBytes - 1) / kPacketBytes);
  size_t lost = 0;
  if (o_.loss > 0) lost = std::binomial_distribution<size_t>(packets, o_.loss)(rng_);
  const double sent_bytes =
      static_cast<double>(bytes) + static_cast<double>(lost) * static_cast<double>(kPacketBytes);
  const double serialize = d.bits_per_s > 0 ? sent_bytes * 8 / d.bits_per_s : 0;
  d.free_at = start + serialize;
  double delay = o_.latency_ms / 1000;
  if (o_.jitter_ms > 0) {
    delay = std::max(0.0, delay + std::normal_distribution<double>(0, o_.jitter_ms / 1000)(rng_));
  }
  if (lost > 0) delay += o_.rto_ms / 1000;
  d.last_arrival = std::max(d.last_arrival, d.free_at + delay);
  return d.last_arrival;
}

}  // namespace hetps
