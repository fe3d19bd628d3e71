#include "common/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hetps {
namespace {

constexpr int kMinOrder = 2, kMaxOrder = 256;

// log(exp(a) + exp(b)) without overflow.
double LogAdd(double a, double b) {
  if (a == -std::numeric_limits<double>::infinity()) return b;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}

}  // namespace

double SampledGaussianRdp(double q, double sigma, int order) {
  const double a = order;
  if (q >= 1.0) return a / (2.0 * sigma * sigma);
  double log_sum = -std::numeric_limits<double>::infinity();
  for (int k = 0; k <= order; ++k) {
    const double log_binomial = std::lgamma(a + 1) - std::lgamma(k + 1.0) - std::lgamma(a - k + 1);
    const double term = log_binomial + k * std::log(q) + (a - k) * std::log1p(-q) +
                        (static_cast<double>(k) * k - k) / (2.0 * sigma * sigma);
    log_sum = LogAdd(log_sum, term);
  }
  return log_sum / (a - 1);
}

RdpAccountant::RdpAccountant() : rdp_(kMaxOrder - kMinOrder + 1, 0.0) {}

void RdpAccountant::AddSampledGaussian(double q, double sigma, int64_t steps) {
  for (size_t i = 0; i < rdp_.size(); ++i) {
    rdp_[i] +=
        static_cast<double>(steps) * SampledGaussianRdp(q, sigma, kMinOrder + static_cast<int>(i));
  }
  steps_ += steps;
}

std::pair<double, int> RdpAccountant::Epsilon(double delta) const {
  if (steps_ == 0) return {0.0, 0};
  double best = std::numeric_limits<double>::infinity();
  int order = 0;
  for (size_t i = 0; i < rdp_.size(); ++i) {
    const int a = kMinOrder + static_cast<int>(i);
    const double eps = rdp_[i] + std::log(1.0 / delta) / (a - 1);
    if (eps < best) {
      best = eps;
      order = a;
    }
  }
  return {best, order};
}

void RdpAccountant::Restore(std::vector<double> rdp, int64_t steps) {
  if (rdp.size() == rdp_.size()) rdp_ = std::move(rdp);
  steps_ = steps;
}

}  // namespace hetps
