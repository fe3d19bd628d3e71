#include "server/aggregation/aggregator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "durable.pb.h"

namespace hetps {

double PolynomialStaleness(int64_t sigma, double a) {
  return std::pow(1.0 + static_cast<double>(std::max<int64_t>(sigma, 0)), -a);
}

double HingeStaleness(int64_t sigma, double a, double b) {
  const double s = static_cast<double>(std::max<int64_t>(sigma, 0));
  return s <= b ? 1.0 : 1.0 / (a * (s - b) + 1.0);
}

const AggregatorRegistry& Aggregators() {
  static const AggregatorRegistry* r = [] {
    auto* r = new AggregatorRegistry("aggregator");
#define HETPS_AGGREGATOR(Name) Register##Name(*r);
#include "server/aggregation/aggregators.def"
#undef HETPS_AGGREGATOR
    return r;
  }();
  return *r;
}

std::string FloatBytes(const float* v, int64_t n) {
  return std::string(reinterpret_cast<const char*>(v), static_cast<size_t>(n) * sizeof(float));
}

Status FloatsFrom(const std::string& bytes, std::vector<float>& out) {
  if (bytes.size() % sizeof(float) != 0) {
    return Status::Malformed(fmt::format("{} bytes are not float32 values", bytes.size()));
  }
  out.resize(bytes.size() / sizeof(float));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return Status();
}

void SaveByWorker(const ReadSnapshots& snapshots, proto::FloatsByWorker& out) {
  for (const auto& [worker, values] : snapshots)
    (*out.mutable_floats())[worker] = FloatBytes(*values);
}

Status LoadByWorker(const proto::FloatsByWorker& in, ReadSnapshots& snapshots) {
  snapshots.clear();
  for (const auto& [worker, bytes] : in.floats()) {
    auto values = std::make_shared<std::vector<float>>();
    if (Status s = FloatsFrom(bytes, *values); !s.ok()) return s;
    snapshots[worker] = std::move(values);
  }
  return Status();
}

Status CheckCombination(const AlgorithmSpec& aggregator, const AlgorithmSpec& consistency) {
  const ApplySchedule schedule = Controllers().EntryFor(consistency.name()).schedule;
  const AggregatorEntry& entry = Aggregators().EntryFor(aggregator.name());
  Status s;
  if (std::find(entry.schedules.begin(), entry.schedules.end(), schedule) ==
      entry.schedules.end()) {
    std::string known;
    for (ApplySchedule k : entry.schedules)
      known += (known.empty() ? "" : ", ") + std::string(ScheduleName(k));
    s = Status::InvalidArgument(fmt::format("{} is defined only for {}; this controller has {}",
                                            aggregator.name(), known, ScheduleName(schedule)));
  } else if (entry.refine) {
    s = entry.refine(aggregator, schedule);
  }
  if (s.ok()) return s;
  return Status::InvalidArgument(
      fmt::format("aggregator {} does not combine with consistency {}: {}", aggregator.Full(),
                  consistency.Full(), s.message()));
}

}  // namespace hetps
