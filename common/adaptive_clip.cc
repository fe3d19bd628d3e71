#include "common/adaptive_clip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace hetps {

StatusOr<AdaptiveClip> AdaptiveClip::Make(const Options& o) {
  if (!(o.quantile > 0 && o.quantile < 1)) {
    return Status::InvalidArgument(
        fmt::format("adaptive clipping: quantile {} is not in (0, 1)", o.quantile));
  }
  if (!(o.initial > 0) || !(o.lr > 0) || !(o.noise > 0)) {
    return Status::InvalidArgument("adaptive clipping needs a clip, a clip_lr and a noise above 0");
  }
  AdaptiveClip a;
  a.o_ = o;
  a.clip_ = o.initial;
  a.count_noise_ = o.count_noise > 0 ? o.count_noise
                   : o.per_client    ? o.noise
                                     : std::max(std::max(o.expected_kept, 1) / 20.0, o.noise);
  const double rest = 1 / (o.noise * o.noise) - 1 / (4 * a.count_noise_ * a.count_noise_);
  if (!(rest > 0)) {
    return Status::InvalidArgument(fmt::format(
        "adaptive clipping: count_noise {} leaves the updates no privacy budget at noise {} "
        "(it needs count_noise > noise / 2)",
        a.count_noise_, o.noise));
  }
  a.update_noise_ = 1 / std::sqrt(rest);
  return a;
}

double AdaptiveClip::EndRound(int64_t round, int64_t within, int64_t kept) {
  if (kept <= 0) return o_.quantile;  // nothing was learnt: S stays
  std::mt19937_64 rng(o_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(round) + 1);
  std::normal_distribution<double> noise(0.0, count_noise_);
  return Step(static_cast<double>(within) + noise(rng), kept);
}

double AdaptiveClip::Step(double noisy_within, int64_t kept) {
  if (kept <= 0 || !std::isfinite(noisy_within)) return o_.quantile;  // S stays
  const double fraction = noisy_within / static_cast<double>(kept);
  clip_ *= std::exp(-o_.lr * (fraction - o_.quantile));
  return fraction;
}

}  // namespace hetps
