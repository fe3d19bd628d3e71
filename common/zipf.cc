#include "common/zipf.h"

#include <algorithm>
#include <cmath>

namespace hetps {
namespace {

// (e^x - 1) / x and log(1 + x) / x, both 1 at x = 0, written so they stay accurate near it.
double ExpRatio(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2; }
double LogRatio(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2; }

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(std::max<uint64_t>(n, 1)), s_(s) {
  h_first_ = H(1.5) - 1;
  h_last_ = H(static_cast<double>(n_) + 0.5);
  accept_ = 2 - HInverse(H(2.5) - Density(2));
}

double ZipfSampler::Density(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::H(double x) const {
  const double log_x = std::log(x);
  return ExpRatio((1 - s_) * log_x) * log_x;
}

double ZipfSampler::HInverse(double y) const {
  const double t = std::max(-1.0, y * (1 - s_));
  return std::exp(LogRatio(t) * y);
}

uint64_t ZipfSampler::operator()(std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (;;) {
    const double y = h_last_ + unit(rng) * (h_first_ - h_last_);
    const double x = HInverse(y);
    const auto k =
        static_cast<uint64_t>(std::clamp(std::floor(x + 0.5), 1.0, static_cast<double>(n_)));
    const double kd = static_cast<double>(k);
    if (kd - x <= accept_ || y >= H(kd + 0.5) - Density(kd)) return k;
  }
}

}  // namespace hetps
