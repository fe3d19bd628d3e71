#include <cmath>
#include <limits>
#include <map>

#include "server/consistency/controller.h"

namespace hetps {

// The DSSP controller's prediction (ALGORITHMS.md §2), exposed for its worked-example test:
// the number of extra iterations r in [0, r_max] after which the fastest worker's predicted
// push F_r = t_f + r * i_f comes closest to a predicted push S_j = t_s + j * i_s (j >= 1) of
// the slowest. Ties go to the smaller r.
int64_t DsspExtraIterations(double t_f, double i_f, double t_s, double i_s, int64_t r_max) {
  int64_t best = 0;
  double best_wait = std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k <= r_max; ++k) {
    const double f = t_f + static_cast<double>(k) * i_f;
    for (int64_t j = 1; j <= std::max<int64_t>(r_max, 1); ++j) {
      const double wait = std::abs(f - (t_s + static_cast<double>(j) * i_s));
      if (wait < best_wait) {
        best_wait = wait;
        best = k;
      }
    }
  }
  return best;
}

namespace {

// Dynamic SSP (Zhao et al., ICDCS'19; ALGORITHMS.md §2). Each finished clock is a push. A
// worker within s_L of the slowest goes on; the fastest, once beyond s_L, is granted r* extra
// iterations (credit) when the slowest worker's predicted arrival makes waiting now wasteful.
// The effective bound stays in [s_L, s_L + r_max]: the credit granted at a gap g is capped at
// s_L + r_max + 1 - g, so the gap never exceeds s_L + r_max + 1 clocks. The granting clock
// consumes one unit of credit (the paper leaves this open; see ALGORITHMS.md).
class Dssp final : public ConsistencyController {
 public:
  Dssp(const std::vector<int32_t>& workers, int64_t lower, int64_t range)
      : ConsistencyController(workers), lower_(lower), range_(range) {}
  std::string name() const override { return "dssp"; }

  void OnClock(int32_t w, int64_t completed, double now) override {
    clocks_.Advance(w, completed);
    Times& t = times_[w];
    t.previous = t.last;
    t.last = now;
    ++t.count;
  }

  bool TryStart(int32_t w, int64_t next, double) override {
    State& st = state_[w];
    if (st.granted >= next) return true;
    const int64_t gap = clocks_.clock(w) - clocks_.min();
    bool ok = false;
    if (st.credit > 0) {
      --st.credit;
      ok = true;
    } else if (gap <= lower_) {
      ok = true;
    } else if (clocks_.clock(w) == clocks_.max() && st.asked < next) {
      st.asked = next;  // the controller is consulted once per clock, at its first asking
      const int64_t cap = lower_ + range_ + 1 - gap;
      const int64_t r = std::min(Predict(w), cap);
      if (r > 0) {
        st.credit = r - 1;
        ok = true;
      }
    }
    if (ok) st.granted = next;
    return ok;
  }

  bool ReadReady(int32_t, int64_t clock) const override {
    return clocks_.min() >= clock - (lower_ + range_);
  }

  void RemoveWorker(int32_t w) override {
    ConsistencyController::RemoveWorker(w);
    times_.erase(w);
    state_.erase(w);
  }

 private:
  struct Times {
    double last = 0, previous = 0;
    int64_t count = 0;
    double interval() const { return count >= 2 ? last - previous : 0.0; }
  };
  struct State {
    int64_t credit = 0;
    int64_t granted = 0;  // highest clock granted
    int64_t asked = 0;    // highest clock the predictor was consulted for
  };

  int64_t Predict(int32_t fastest) const {
    const int32_t slow = clocks_.slowest();
    if (slow < 0 || !times_.contains(fastest) || !times_.contains(slow)) return 0;
    const Times& f = times_.at(fastest);
    const Times& s = times_.at(slow);
    return DsspExtraIterations(f.last, f.interval(), s.last, s.interval(), range_);
  }

  int64_t lower_, range_;
  std::map<int32_t, Times> times_;
  std::map<int32_t, State> state_;
};

}  // namespace

void RegisterDssp(ControllerRegistry& r) {
  r.Add({"dssp",
         "dynamic SSP: the bound moves inside [lower, lower + range] from the workers' measured "
         "clock intervals (Zhao et al., ICDCS'19)",
         {ParamDef::Int("lower", "3", 0, 1e9, "lower staleness bound s_L"),
          ParamDef::Int("range", "12", 0, 1e9, "most extra iterations r_max")}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<Dssp>(workers, spec.Int("lower"), spec.Int("range"));
         },
         ApplySchedule::kOnArrival});
}

}  // namespace hetps
