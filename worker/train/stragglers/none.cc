// none: never slowed.
#include "worker/train/straggler.h"

namespace hetps {

void RegisterNoStraggler(StragglerRegistry& r) {
  r.Add({"none", "never slowed", {}},
        {[](const AlgorithmSpec&, const StragglerContext&) { return ConstantStraggler(1.0); }});
}

}  // namespace hetps
