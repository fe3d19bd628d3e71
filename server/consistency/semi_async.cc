#include <algorithm>
#include <deque>
#include <map>

#include "common/quorum.h"
#include "server/consistency/controller.h"

namespace hetps {

namespace {

// Semi-asynchronous K-of-N rounds, FedSA-style (Ma et al., JSAC'21; ALGORITHMS.md §4). A
// worker's finished clock is its upload. A round closes at the K-th upload since the last one
// closed: those K workers' held updates become one step, weighted by samples * (1 + sigma)^-a,
// and only those K go on (their Clock() returns); the others keep training on their stale base
// and join a later round. Every upload is used once. quorum = 0 picks K automatically
// (common/quorum.h): the scheduler's hint when one came (AutoQuorum over the iteration-time
// EWMAs it sees, the same K on every server), else AutoQuorum over each worker's training time
// from release to upload as this server measured it (EWMA with beta = 0.5; N until every
// worker has one). K never
// exceeds the live workers, so a dead worker stalls no round, and a round closes with what it
// has once its first upload has waited round_timeout (workers that stopped uploading, e.g. at
// the end of a job, stall none either).
class SemiAsync final : public ConsistencyController {
 public:
  SemiAsync(const std::vector<int32_t>& workers, int64_t quorum, double a, double timeout_s)
      : ConsistencyController(workers), quorum_(quorum), a_(a), timeout_s_(timeout_s) {}
  std::string name() const override { return "semi_async"; }
  bool synchronous() const override { return true; }

  void OnClock(int32_t w, int64_t completed, double now) override {
    ConsistencyController::OnClock(w, completed, now);
    // Training time since its round released it: time spent waiting must not count, or every
    // worker would look as slow as the round it waits for.
    Interval& iv = intervals_[w];
    if (iv.released >= 0) {
      const double d = now - iv.released;
      iv.ewma = iv.ewma < 0 ? d : 0.5 * iv.ewma + 0.5 * d;
      iv.released = -1;
    }
    if (std::find(uploads_.begin(), uploads_.end(), w) == uploads_.end()) {
      if (uploads_.empty()) first_upload_ = now;
      uploads_.push_back(w);
    }
    Close();
  }
  void Tick(double now) override {
    if (uploads_.empty() || now - first_upload_ < timeout_s_) return;
    Emit(static_cast<int64_t>(uploads_.size()));  // the deadline passed: close with what arrived
    first_upload_ = now;
  }
  // A worker waits from its upload until the round using it closes.
  bool TryStart(int32_t w, int64_t, double now) override {
    if (std::find(uploads_.begin(), uploads_.end(), w) != uploads_.end()) return false;
    intervals_[w].released = now;
    return true;
  }
  bool ReadReady(int32_t, int64_t) const override { return true; }
  void RemoveWorker(int32_t w) override {
    ConsistencyController::RemoveWorker(w);
    std::erase(uploads_, w);
    intervals_.erase(w);
    Close();
  }
  std::vector<Round> TakeRounds() override { return std::exchange(closed_, {}); }
  void OnHint(const std::vector<int32_t>&, int64_t quorum) override {
    hinted_quorum_ = quorum;
    Close();
  }
  int64_t Quorum() const {
    const int64_t live = static_cast<int64_t>(clocks_.all().size());
    int64_t k = quorum_;
    if (k == 0 && hinted_quorum_ > 0) {
      k = hinted_quorum_;  // the same K on every server, from the scheduler's straggler flags
    } else if (k == 0) {
      std::vector<double> measured;
      for (const auto& [w, c] : clocks_.all()) {
        auto it = intervals_.find(w);
        if (it == intervals_.end() || it->second.ewma < 0) return std::max<int64_t>(1, live);
        measured.push_back(it->second.ewma);
      }
      k = AutoQuorum(measured);
    }
    return std::max<int64_t>(1, std::min(k, live));
  }

 private:
  struct Interval {
    double released = -1;  // when its last round released it
    double ewma = -1;      // of its training times (release to upload)
  };
  void Close() {
    while (!uploads_.empty() && static_cast<int64_t>(uploads_.size()) >= Quorum()) Emit(Quorum());
  }
  // Closes a round with the first `k` waiting uploads.
  void Emit(int64_t k) {
    Round r;
    r.clock = kUnbounded;
    r.workers.assign(uploads_.begin(), uploads_.begin() + k);
    r.one_step = true;
    r.combine = Round::Combine::kWeighted;
    r.staleness_exponent = a_;
    uploads_.erase(uploads_.begin(), uploads_.begin() + k);
    closed_.push_back(std::move(r));
  }

  int64_t quorum_;
  int64_t hinted_quorum_ = 0;  // from the scheduler; 0: none yet
  double a_;
  double timeout_s_;
  double first_upload_ = 0;      // of the round being collected
  std::deque<int32_t> uploads_;  // waiting for their round, in arrival order
  std::map<int32_t, Interval> intervals_;
  std::vector<Round> closed_;
};

}  // namespace

void RegisterSemiAsync(ControllerRegistry& r) {
  ParamDef quorum = ParamDef::Int("quorum", "auto", 1, 1e6,
                                  "K: a round closes at its K-th upload; auto: K maximizing "
                                  "K / t_(K) over the workers' iteration times");
  quorum.words = {"auto"};
  r.Add({"semi_async",
         "K-of-N rounds (FedSA): a step on the first K uploads weighted by samples * (1 + "
         "staleness)^-a; the others keep training on their stale base (Ma et al., JSAC'21)",
         {quorum, ParamDef::Real("exponent", "0.5", 0, 100, "a in (1 + staleness)^-a"),
          ParamDef::Int("timeout_ms", "2000", 1, 1e9,
                        "a round closes this long after its first upload")}},
        {[](const AlgorithmSpec& spec, const std::vector<int32_t>& workers) {
           return std::make_unique<SemiAsync>(
               workers, spec.Is("quorum", "auto") ? 0 : spec.Int("quorum"), spec.Number("exponent"),
               spec.Number("timeout_ms") / 1000.0);
         },
         ApplySchedule::kQuorumRounds});
}

}  // namespace hetps
