#include "worker/edge/availability.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

namespace hetps {
namespace {

class Always final : public Availability {
 public:
  double NextOnline(double t) override { return t; }
  bool OnlineThroughout(double, double) override { return true; }
};

// Online [0, t1), offline [t1, t2), online [t2, t3), ...: the switch times are drawn lazily,
// in order, from one seeded stream, so a client's timeline depends only on its seed.
class OnOff final : public Availability {
 public:
  OnOff(double on_s, double off_s, uint64_t seed)
      : on_(1.0 / on_s), off_(1.0 / off_s), rng_(seed) {}

  double NextOnline(double t) override {
    const size_t i = SwitchAfter(t);  // switches_[i] is the first switch after t
    if (i % 2 == 0) return t;         // an even number of switches before t: online
    return switches_[i];
  }
  bool OnlineThroughout(double from, double to) override {
    const size_t i = SwitchAfter(from);
    return i % 2 == 0 && switches_[i] > to;
  }

 private:
  size_t SwitchAfter(double t) {
    while (switches_.empty() || switches_.back() <= t) Extend();
    return static_cast<size_t>(std::upper_bound(switches_.begin(), switches_.end(), t) -
                               switches_.begin());
  }
  void Extend() {
    const double last = switches_.empty() ? 0.0 : switches_.back();
    const bool online_now = switches_.size() % 2 == 0;
    std::exponential_distribution<double> period(online_now ? on_ : off_);
    switches_.push_back(last + period(rng_));
  }

  double on_, off_;  // rates: 1 / mean duration
  std::mt19937_64 rng_;
  std::vector<double> switches_;
};

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

const AvailabilityRegistry& Availabilities() {
  static const AvailabilityRegistry* r = [] {
    auto* r = new AvailabilityRegistry("availability");
    r->Add({"always", "online throughout the run", {}},
           {[](const AlgorithmSpec&,
               const AvailabilityContext&) -> StatusOr<std::unique_ptr<Availability>> {
             return std::unique_ptr<Availability>(std::make_unique<Always>());
           }});
    r->Add({"onoff",
            "alternating online and offline periods, exponentially distributed, from online at "
            "the start",
            {ParamDef::Real("on_s", "60", 0, 1e9, "mean online period, seconds", true),
             ParamDef::Real("off_s", "20", 0, 1e9, "mean offline period, seconds", true)}},
           {[](const AlgorithmSpec& spec,
               const AvailabilityContext& c) -> StatusOr<std::unique_ptr<Availability>> {
             return std::unique_ptr<Availability>(
                 std::make_unique<OnOff>(spec.Number("on_s"), spec.Number("off_s"), c.seed));
           }});
    r->Add(
        {"trace",
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
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<Availability>> MakeAvailability(const std::string& text, uint64_t seed,
                                                         int client) {
  auto spec = Availabilities().Parse(text);
  if (!spec.ok()) return spec.status();
  return Availabilities().EntryFor(spec->name()).make(*spec, {.seed = seed, .client = client});
}

}  // namespace hetps
