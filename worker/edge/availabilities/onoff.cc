// onoff:on_s=A,off_s=B: alternating online and offline periods, exponentially distributed.
#include <algorithm>
#include <random>
#include <vector>

#include "worker/edge/availability.h"

namespace hetps {
namespace {

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

}  // namespace

void RegisterOnOffAvailability(AvailabilityRegistry& r) {
  r.Add({"onoff",
         "alternating online and offline periods, exponentially distributed, from online at "
         "the start",
         {ParamDef::Real("on_s", "60", 0, 1e9, "mean online period, seconds", true),
          ParamDef::Real("off_s", "20", 0, 1e9, "mean offline period, seconds", true)}},
        {[](const AlgorithmSpec& spec,
            const AvailabilityContext& c) -> StatusOr<std::unique_ptr<Availability>> {
          return std::unique_ptr<Availability>(
              std::make_unique<OnOff>(spec.Number("on_s"), spec.Number("off_s"), c.seed));
        }});
}

}  // namespace hetps
