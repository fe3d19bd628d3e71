// trace:file=F,scale=S: online periods from a trace file, repeating after its span.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "worker/edge/availability.h"

namespace hetps {
namespace {

// Online periods read from a trace (sorted, merged, within [0, span)), repeating with the
// trace's span.
class Trace final : public Availability {
 public:
  Trace(std::vector<std::pair<double, double>> online, double span)
      : online_(std::move(online)), span_(span) {}

  double NextOnline(double t) override {
    const double base = std::floor(t / span_) * span_;
    for (const double b : {base, base + span_}) {
      for (const auto& [on, off] : online_) {
        if (b + off > t) return std::max(t, b + on);
      }
    }
    return t;  // not reached: a trace client has an online period
  }
  bool OnlineThroughout(double from, double to) override {
    for (double t = from; t <= to;) {
      if (NextOnline(t) != t) return false;
      const double base = std::floor(t / span_) * span_;
      double end = t;
      for (const auto& [on, off] : online_) {
        if (base + on <= t && t < base + off) end = base + off;
      }
      if (end <= t) return false;  // rounding at a period's edge
      t = end;                     // online until then; the next period may start right there
    }
    return true;
  }

 private:
  std::vector<std::pair<double, double>> online_;
  double span_;
};

StatusOr<std::unique_ptr<Availability>> ReadTrace(const std::string& path, double scale,
                                                  int client) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("availability trace {}: cannot read it", path));
  std::map<int, std::vector<std::pair<double, double>>> periods;
  double span = 0;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#' || line.starts_with("client")) continue;
    std::istringstream row(line);
    int c = -1;
    double on = -1, off = -1;
    char comma1 = 0, comma2 = 0;
    if (!(row >> c >> comma1 >> on >> comma2 >> off) || comma1 != ',' || comma2 != ',' || c < 0 ||
        on < 0 || off <= on) {
      return Status::InvalidArgument(fmt::format(
          "availability trace {}:{}: expected 'client,online_s,offline_s' with 0 <= online_s < "
          "offline_s, got '{}'",
          path, number, line));
    }
    periods[c].push_back({on * scale, off * scale});
    span = std::max(span, off * scale);
  }
  if (periods.empty()) return Status::InvalidArgument("availability trace " + path + " is empty");
  const int clients = periods.rbegin()->first + 1;
  const int mine = client % clients;
  if (!periods.contains(mine)) {
    return Status::InvalidArgument(
        fmt::format("availability trace {}: client {} has no online period", path, mine));
  }
  std::vector<std::pair<double, double>> online;  // merged where periods touch or overlap
  auto sorted = periods[mine];
  std::sort(sorted.begin(), sorted.end());
  for (const auto& p : sorted) {
    if (!online.empty() && p.first <= online.back().second) {
      online.back().second = std::max(online.back().second, p.second);
    } else {
      online.push_back(p);
    }
  }
  return std::unique_ptr<Availability>(std::make_unique<Trace>(std::move(online), span));
}

}  // namespace

void RegisterTraceAvailability(AvailabilityRegistry& r) {
  r.Add({"trace",
         "online periods from a trace file (rows client,online_s,offline_s), repeating after "
         "its span",
         {ParamDef::Text("file", "", "the trace's path"),
          ParamDef::Real("scale", "1", 0, 1e9, "times in the trace are multiplied by this", true)}},
        {[](const AlgorithmSpec& spec, const AvailabilityContext& c) {
          if (spec.Text("file").empty()) {
            return StatusOr<std::unique_ptr<Availability>>(
                Status::InvalidArgument("availability trace: give file=PATH"));
          }
          return ReadTrace(spec.Text("file"), spec.Number("scale"), c.client);
        }});
}

}  // namespace hetps
