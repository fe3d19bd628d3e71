#include "server/optimizer/optimizer.h"

namespace hetps {

OptimizerOptions OptimizerOptions::FromSpec(const AlgorithmSpec& spec) {
  OptimizerOptions o;
  const std::pair<const char*, double*> fields[] = {
      {"lr", &o.lr},       {"momentum", &o.momentum}, {"beta1", &o.beta1},
      {"beta2", &o.beta2}, {"epsilon", &o.epsilon},   {"weight_decay", &o.weight_decay}};
  for (const auto& [key, field] : fields) {
    if (spec.Has(key)) *field = spec.Number(key);
  }
  return o;
}

std::vector<ParamDef> CommonOptimizerParams() {
  return {ParamDef::Real("lr", "0.01", 0, 1e6, "learning rate", /*min_open=*/true),
          ParamDef::Real("weight_decay", "0", 0, 1e6, "L2 weight decay added to the gradient")};
}

const OptimizerRegistry& Optimizers() {
  static const OptimizerRegistry* r = [] {
    auto* r = new OptimizerRegistry("optimizer");
#define HETPS_OPTIMIZER(Name) Register##Name(*r);
#include "server/optimizer/optimizers.def"
#undef HETPS_OPTIMIZER
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& text) {
  auto spec = Optimizers().Parse(text);
  if (!spec.ok()) return spec.status();
  return Optimizers().EntryFor(spec->name()).make(*spec);
}

}  // namespace hetps
