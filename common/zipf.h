// Zipf-distributed ranks in [1, n]: P(k) proportional to k^-s, for n up to 2^62 and any s > 0,
// drawn in O(1) by rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996) without a table of n
// weights. Used for sparse features: the ids of a click log's categorical fields.
//
// Thread-safety: a sampler is immutable; the generator passed in is the caller's.
#pragma once

#include <cstdint>
#include <random>

namespace hetps {

class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s);
  uint64_t operator()(std::mt19937_64& rng) const;
  uint64_t n() const { return n_; }

 private:
  double H(double x) const;         // the integral of x^-s (shifted so H is smooth at s = 1)
  double HInverse(double y) const;  // its inverse
  double Density(double x) const;   // x^-s

  uint64_t n_;
  double s_;
  double h_first_, h_last_, accept_;
};

}  // namespace hetps
