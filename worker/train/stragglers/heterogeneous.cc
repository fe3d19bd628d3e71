// heterogeneous:spread=S: a persistent slowdown drawn once per worker.
#include <cmath>
#include <random>

#include "worker/train/straggler.h"

namespace hetps {

void RegisterHeterogeneousStraggler(StragglerRegistry& r) {
  r.Add({"heterogeneous",
         "a persistent slowdown drawn once per worker, exp(spread |z|) with z standard normal",
         {ParamDef::Real("spread", "0.5", 0, 5, "the spread of the log-slowdowns")}},
        {[](const AlgorithmSpec& spec, const StragglerContext& c) {
          std::mt19937_64 rng(StragglerStreamSeed(c));
          std::normal_distribution<double> z(0, 1);
          return ConstantStraggler(std::exp(spec.Number("spread") * std::abs(z(rng))));
        }});
}

}  // namespace hetps
