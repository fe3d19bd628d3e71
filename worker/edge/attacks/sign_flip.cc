#include "worker/edge/attack.h"

namespace hetps {
namespace {

// Sign flipping: the client uploads -C x its honest delta, pushing the model up the gradient.
class SignFlip final : public Attack {
 public:
  explicit SignFlip(double factor) : factor_(static_cast<float>(factor)) {}
  void PoisonUpdate(std::vector<std::vector<float>>& delta, std::mt19937_64&) override {
    for (auto& t : delta) {
      for (float& v : t) v *= -factor_;
    }
  }

 private:
  float factor_;
};

}  // namespace

void RegisterSignFlip(AttackRegistry& r) {
  r.Add({"sign_flip",
         "uploads -factor x the honest delta",
         {ParamDef::Real("factor", "1", 0, 1e6, "C in -C x delta", true)}},
        {[](const AlgorithmSpec& spec) {
          return std::make_unique<SignFlip>(spec.Number("factor"));
        }});
}

}  // namespace hetps
