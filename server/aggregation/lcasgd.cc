// LC-ASGD, loss-predicting delay compensation (after Li, He et al., ICPP'20; ALGORITHMS.md §6).
// From the paper: the server predicts each worker's loss from the losses it reported and uses
// the prediction to compensate its delayed gradients, so longer delays are tolerated. The
// paper's predictor models and compensation formula are not reproduced (not confirmed); what
// follows is this project's design.
//
// Each worker reports the training loss of the minibatch behind each push (Client::SetLoss).
// Per worker the compensator keeps the last `history` pairs (base version, loss) and fits a
// least-squares line through them: the slope is how fast that worker's loss falls per version
// applied. A gradient of delay d = version - base was computed where the worker's loss was l;
// the loss predicted where it is applied is l' = l + slope * d. Near a minimum the gradient's
// magnitude goes as the loss to the power 1/2 (a quadratic bowl: |g|^2 ~ loss), so the
// gradient is scaled by rho = max(rho_min, (l' / l)^power), power = 0.5 by default. No delay, no
// loss, fewer than two reports, or a loss that is not falling: rho = 1, plain SGD.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>

#include "durable.pb.h"
#include "server/aggregation/compensator.h"

namespace hetps {
namespace {

class LcAsgd final : public Compensator {
 public:
  explicit LcAsgd(const AlgorithmSpec& spec)
      : history_(spec.Int("history")),
        power_(spec.Number("power")),
        rho_min_(spec.Number("rho_min")) {}

  const float* Compensate(const CompensationInput& in, const float* g,
                          std::vector<float>& out) override {
    if (!(in.loss > 0) || !std::isfinite(in.loss)) return g;  // nothing to predict from
    auto& h = reports_[in.worker];
    h.push_back({static_cast<double>(in.base_version), in.loss});
    while (static_cast<int64_t>(h.size()) > history_) h.pop_front();
    const double rho = Scale(h, in.loss, static_cast<double>(in.version - in.base_version));
    if (rho >= 1.0) return g;
    out.resize(in.n);
    const auto r = static_cast<float>(rho);
    for (int64_t i = 0; i < in.n; ++i) out[i] = r * g[i];
    return out.data();
  }

  // The predicted loss's ratio to `loss` after `delay` more versions, to the power, floored.
  double Scale(const std::deque<std::pair<double, double>>& h, double loss, double delay) const {
    if (delay <= 0 || h.size() < 2) return 1.0;
    double mx = 0, my = 0;
    for (const auto& [x, y] : h) {
      mx += x;
      my += y;
    }
    mx /= static_cast<double>(h.size());
    my /= static_cast<double>(h.size());
    double sxy = 0, sxx = 0;
    for (const auto& [x, y] : h) {
      sxy += (x - mx) * (y - my);
      sxx += (x - mx) * (x - mx);
    }
    if (!(sxx > 0)) return 1.0;
    const double slope = sxy / sxx;
    if (!(slope < 0)) return 1.0;
    const double predicted = std::max(0.0, loss + slope * delay);
    return std::max(rho_min_, std::pow(predicted / loss, power_));
  }

  // Per worker: its reports as (version, loss) doubles, in order.
  void Save(proto::AggregatorState& out) const override {
    auto& by_worker = (*out.mutable_per_worker())["lcasgd_reports"];
    for (const auto& [worker, h] : reports_) {
      std::string bytes(h.size() * 2 * sizeof(double), '\0');
      size_t at = 0;
      for (const auto& [x, y] : h) {
        std::memcpy(bytes.data() + at, &x, sizeof x);
        std::memcpy(bytes.data() + at + sizeof x, &y, sizeof y);
        at += 2 * sizeof(double);
      }
      (*by_worker.mutable_floats())[worker] = std::move(bytes);
    }
  }
  Status Load(const proto::AggregatorState& in) override {
    reports_.clear();
    auto it = in.per_worker().find("lcasgd_reports");
    if (it == in.per_worker().end()) return Status();
    for (const auto& [worker, bytes] : it->second.floats()) {
      if (bytes.size() % (2 * sizeof(double)) != 0) {
        return Status::Malformed("lcasgd: saved reports are not whole (version, loss) pairs");
      }
      auto& h = reports_[worker];
      for (size_t at = 0; at < bytes.size(); at += 2 * sizeof(double)) {
        double x, y;
        std::memcpy(&x, bytes.data() + at, sizeof x);
        std::memcpy(&y, bytes.data() + at + sizeof x, sizeof y);
        h.push_back({x, y});
      }
    }
    return Status();
  }

 private:
  int64_t history_;
  double power_, rho_min_;
  std::map<int32_t, std::deque<std::pair<double, double>>> reports_;
};

}  // namespace

void RegisterLcAsgd(CompensatorRegistry& r) {
  r.Add({"lcasgd",
         "loss-predicting compensation (after LC-ASGD, Li, He et al., ICPP'20): g scaled by the "
         "worker's predicted loss drop over the delay",
         {ParamDef::Int("history", "8", 2, 1000, "LC-ASGD: losses per worker the predictor fits"),
          ParamDef::Real("power", "0.5", 0, 4,
                         "LC-ASGD: g scaled by (predicted / reported loss)^power"),
          ParamDef::Real("rho_min", "0.1", 0, 1, "LC-ASGD: the least scale", /*min_open=*/true)}},
        {[](const AlgorithmSpec& spec) { return std::make_unique<LcAsgd>(spec); }});
}

}  // namespace hetps
