#include "common/privacy.h"

#include <fmt/format.h>

#include <cmath>

namespace hetps {
namespace {

std::vector<ParamDef> Params() {
  ParamDef delta =
      ParamDef::Real("delta", "1e-5", 0, 1, "the delta (epsilon, delta) is reported at", true);
  delta.max_open = true;
  return {ParamDef::Real("clip", "1", 0, 1e12, "L2 norm bound of a client's update", true),
          ParamDef::Real("noise", "1", 0, 1e6, "noise standard deviation / clip", true), delta};
}

// Adaptive clipping (common/adaptive_clip.h): off at quantile 0.
std::vector<ParamDef> AdaptiveParams() {
  std::vector<ParamDef> p = Params();
  ParamDef quantile = ParamDef::Real(
      "quantile", "0", 0, 1,
      "adaptive clipping: the quantile of the update norms the clip follows, clip being its "
      "start (0: the clip stays)");
  quantile.max_open = true;
  p.push_back(quantile);
  p.push_back(ParamDef::Real("clip_lr", "0.2", 0, 10,
                             "adaptive clipping: the geometric step's rate", true));
  p.push_back(ParamDef::Real("count_noise", "0", 0, 1e6,
                             "adaptive clipping: std of the noise on the count of clients within "
                             "the clip (0: max(K / 20, noise) for rounds of K); local: on each "
                             "client's bit (0: noise)"));
  return p;
}

}  // namespace

const SpecRegistry& PrivacyModes() {
  static const SpecRegistry* r = [] {
    struct Modes : SpecRegistry {
      Modes() : SpecRegistry("dp") {
        AddInfo({"none", "no clipping, no noise", {}});
        AddInfo({"central",
                 "clients clip their updates; the servers add Gaussian noise to each round's sum "
                 "(DP-FedAvg, McMahan et al. ICLR'18); with quantile, the clip follows that "
                 "quantile of the update norms (adaptive clipping, Andrew et al. NeurIPS'21)",
                 AdaptiveParams()});
        AddInfo({"local",
                 "each client clips its update and adds the Gaussian noise itself; with "
                 "quantile, adaptive clipping with each client's bit noised by itself",
                 AdaptiveParams()});
        AddInfo({"distributed",
                 "each client clips its update and adds its share of the noise, std noise x "
                 "clip / sqrt(K) for a round keeping K uploads, so that the sum the servers learn "
                 "under --secure_aggregation carries the central noise (distributed DP); with "
                 "quantile, adaptive clipping with the bits summed under the masks",
                 AdaptiveParams()});
      }
    };
    return new Modes();
  }();
  return *r;
}

StatusOr<Privacy> ParsePrivacy(const std::string& text) {
  auto spec = PrivacyModes().Parse(text);
  if (!spec.ok()) return spec.status();
  Privacy p;
  if (spec->name() == "none") return p;
  p.mode = spec->name() == "central"       ? Privacy::Mode::kCentral
           : spec->name() == "distributed" ? Privacy::Mode::kDistributed
                                           : Privacy::Mode::kLocal;
  p.clip = spec->Number("clip");
  p.noise = spec->Number("noise");
  p.delta = spec->Number("delta");
  p.quantile = spec->Number("quantile");
  p.clip_lr = spec->Number("clip_lr");
  p.count_noise = spec->Number("count_noise");
  return p;
}

const char* Privacy::name() const {
  switch (mode) {
    case Mode::kCentral:
      return "central";
    case Mode::kLocal:
      return "local";
    case Mode::kDistributed:
      return "distributed";
    default:
      return "none";
  }
}

std::string Privacy::ToString() const {
  if (!on()) return "none";
  if (adaptive()) {
    return fmt::format(
        "{}:clip={:g},clip_lr={:g},count_noise={:g},delta={:g},noise={:g},quantile={:g}", name(),
        clip, clip_lr, count_noise, delta, noise, quantile);
  }
  return fmt::format("{}:clip={:g},delta={:g},noise={:g}", name(), clip, delta, noise);
}

double ClipUpdate(std::vector<std::vector<float>>& update, double clip) {
  double squares = 0;
  for (const auto& t : update) {
    for (float v : t) squares += static_cast<double>(v) * v;
  }
  const double norm = std::sqrt(squares);
  if (norm > clip) {
    const float scale = static_cast<float>(clip / norm);
    for (auto& t : update) {
      for (float& v : t) v *= scale;
    }
  }
  return norm;
}

void AddGaussianNoise(std::vector<std::vector<float>>& update, double std, std::mt19937_64& rng) {
  std::normal_distribution<double> noise(0.0, std);
  for (auto& t : update) {
    for (float& v : t) v = static_cast<float>(v + noise(rng));
  }
}

}  // namespace hetps
