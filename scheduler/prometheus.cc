#include "scheduler/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hetps {

void Histogram::Add(double v, int64_t n) {
  if (n <= 0) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i] += n;
  count_ += n;
  sum_ += v * static_cast<double>(n);
}

void Exposition::Family(const std::string& name, const char* type, const char* help) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Exposition::Sample(const std::string& name, const std::string& labels, double value) {
  std::string v;
  if (std::isnan(value)) {
    v = "NaN";
  } else if (std::isinf(value)) {
    v = value > 0 ? "+Inf" : "-Inf";
  } else {
    v = fmt::format("{}", value);
  }
  out_ += labels.empty() ? fmt::format("{} {}\n", name, v)
                         : fmt::format("{}{{{}}} {}\n", name, labels, v);
}

void Exposition::Histo(const std::string& name, const std::string& labels, const Histogram& h) {
  int64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    Sample(name + "_bucket", fmt::format("{}le=\"{}\"", sep, h.bounds()[i]),
           static_cast<double>(cumulative));
  }
  Sample(name + "_bucket", sep + "le=\"+Inf\"", static_cast<double>(h.count()));
  Sample(name + "_sum", labels, h.sum());
  Sample(name + "_count", labels, static_cast<double>(h.count()));
}

}  // namespace hetps
