// persistent:factor=F: always F times slower (one slow worker: give it to one rank).
#include "worker/train/straggler.h"

namespace hetps {

void RegisterPersistentStraggler(StragglerRegistry& r) {
  r.Add({"persistent",
         "always factor times slower",
         {ParamDef::Real("factor", "3", 1, 1000, "the slowdown")}},
        {[](const AlgorithmSpec& spec, const StragglerContext&) {
          return ConstantStraggler(spec.Number("factor"));
        }});
}

}  // namespace hetps
