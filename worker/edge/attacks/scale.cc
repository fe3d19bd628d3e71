#include "worker/edge/attack.h"

namespace hetps {
namespace {

// Scaling (model boosting, Bhagoji et al. 2019): the client uploads K x its honest delta, so
// that a plain mean moves by its update K times as much.
class ScaleAttack final : public Attack {
 public:
  explicit ScaleAttack(double factor) : factor_(static_cast<float>(factor)) {}
  void PoisonUpdate(std::vector<std::vector<float>>& delta, std::mt19937_64&) override {
    for (auto& t : delta) {
      for (float& v : t) v *= factor_;
    }
  }

 private:
  float factor_;
};

}  // namespace

void RegisterScaleAttack(AttackRegistry& r) {
  r.Add({"scale",
         "uploads factor x the honest delta (a boosted update)",
         {ParamDef::Real("factor", "10", 0, 1e9, "K in K x delta", true)}},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<ScaleAttack>(spec.Number("factor"));
        }});
}

}  // namespace hetps
