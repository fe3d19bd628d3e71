#include "worker/edge/attack.h"

namespace hetps {
namespace {

// Gaussian updates: the client uploads noise of standard deviation S in place of its delta,
// drawn from its own seeded stream.
class GaussianAttack final : public Attack {
 public:
  explicit GaussianAttack(double std) : std_(std) {}
  void PoisonUpdate(std::vector<std::vector<float>>& delta, std::mt19937_64& rng) override {
    std::normal_distribution<double> noise(0.0, std_);
    for (auto& t : delta) {
      for (float& v : t) v = static_cast<float>(noise(rng));
    }
  }

 private:
  double std_;
};

}  // namespace

void RegisterGaussianAttack(AttackRegistry& r) {
  r.Add({"gaussian",
         "uploads Gaussian noise in place of the delta",
         {ParamDef::Real("std", "1", 0, 1e9, "standard deviation of each value", true)}},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<GaussianAttack>(spec.Number("std"));
        }});
}

}  // namespace hetps
