// Rényi-DP accountant (Mironov, CSF'17; the sampled Gaussian mechanism: Mironov, Talwar and
// Zhang, 2019): the RDP of every step at the integer orders 2..256, added up over the steps,
// and converted to (epsilon, delta) as min over orders a of rdp(a) + log(1/delta) / (a - 1).
// A step of the sampled Gaussian mechanism with sampling rate q and noise multiplier sigma has,
// at integer order a,
//   rdp(a) = log( sum_{k=0..a} C(a,k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 sigma^2)) ) / (a - 1)
// (q = 1: the Gaussian mechanism's a / (2 sigma^2)). Integer orders only: the result is an upper
// bound within a fraction of a percent of accountants that add fractional orders (tested
// against TensorFlow Privacy's published figures).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace hetps {

class RdpAccountant {
 public:
  RdpAccountant();
  // `steps` steps of the sampled Gaussian mechanism. REQUIRES: q in (0, 1], sigma > 0.
  void AddSampledGaussian(double q, double sigma, int64_t steps = 1);
  // (epsilon, the order that gave it) at `delta`; epsilon 0 before any step.
  std::pair<double, int> Epsilon(double delta) const;
  int64_t steps() const { return steps_; }

  // The accumulated RDP per order (2, 3, ...), to save and restore.
  const std::vector<double>& rdp() const { return rdp_; }
  void Restore(std::vector<double> rdp, int64_t steps);

 private:
  std::vector<double> rdp_;  // at orders 2 .. 2 + size - 1
  int64_t steps_ = 0;
};

// One step's RDP of the sampled Gaussian mechanism at integer order `order` >= 2.
double SampledGaussianRdp(double q, double sigma, int order);

}  // namespace hetps
