#include "worker/edge/attack.h"

namespace hetps {
namespace {

// Label flipping (data poisoning, e.g. Tolpegin et al. 2020): the client trains honestly on
// its data with every label y replaced by classes - 1 - y, and uploads that delta.
class LabelFlip final : public Attack {
 public:
  void PoisonLabels(int32_t classes, std::vector<int32_t>& labels) override {
    for (int32_t& y : labels) y = classes - 1 - y;
  }
};

}  // namespace

void RegisterLabelFlip(AttackRegistry& r) {
  r.Add({"label_flip", "trains on its data with each label y as classes-1-y", {}},
        {[](const AlgorithmSpec&) { return std::make_unique<LabelFlip>(); }});
}

}  // namespace hetps
