#include "scheduler/join_limiter.h"

#include <algorithm>

namespace hetps {

JoinLimiter::JoinLimiter(double rate, double burst, size_t max_addresses)
    : rate_(rate), burst_(std::max(1.0, burst)), max_addresses_(max_addresses) {}

double JoinLimiter::Tokens(const Bucket& b, double now) const {
  return std::min(burst_, b.tokens + std::max(0.0, now - b.at) * rate_);
}

void JoinLimiter::Take(const std::string& address, double now) {
  if (rate_ <= 0) return;
  auto it = buckets_.find(address);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_addresses_) {
      std::erase_if(buckets_, [&](const auto& e) { return Tokens(e.second, now) >= burst_; });
      if (buckets_.size() >= max_addresses_) buckets_.clear();
    }
    it = buckets_.emplace(address, Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  b.tokens = std::max(0.0, Tokens(b, now) - 1);
  b.at = now;
}

double JoinLimiter::Wait(const std::string& address, double now) const {
  if (rate_ <= 0) return 0;
  auto it = buckets_.find(address);
  if (it == buckets_.end()) return 0;
  const double tokens = Tokens(it->second, now);
  return tokens >= 1 ? 0 : (1 - tokens) / rate_;
}

}  // namespace hetps
