// The Prometheus text exposition format (what /metrics serves): a cumulative histogram over
// fixed bounds, and a writer of metric families and samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetps {

// Prometheus-style cumulative histogram over fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void Add(double v, int64_t n = 1);
  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: observations <= bounds()[i] and > the bound before (last: above every bound).
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0;
};

// Writes families (# HELP / # TYPE) and their samples; values print as Prometheus reads them
// (NaN, +Inf, -Inf). Label text is passed pre-formatted ("worker=\"1\",node=\"4\"").
class Exposition {
 public:
  void Family(const std::string& name, const char* type, const char* help);
  void Sample(const std::string& name, const std::string& labels, double value);
  // The _bucket (cumulative), _sum and _count samples of `h`.
  void Histo(const std::string& name, const std::string& labels, const Histogram& h);
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace hetps
