#include "server/optimizer/optimizer.h"

#include <atomic>

namespace hetps {
namespace {
std::atomic<bool> baseline_only{false};
}  // namespace

SimdPath ActiveSimdPath() {
#if defined(__x86_64__) && defined(__GNUC__)
  // The CPU and the kernel must both support AVX2 (the check covers the saved YMM state).
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && !baseline_only.load(std::memory_order_relaxed)) return SimdPath::kAvx2;
#endif
  return SimdPath::kBaseline;
}

const char* SimdPathName(SimdPath path) {
  if (path == SimdPath::kAvx2) return "avx2";
#if defined(__x86_64__)
  return "sse2";
#else
  return "baseline";
#endif
}

void LimitSimdToBaseline(bool limit) { baseline_only.store(limit, std::memory_order_relaxed); }

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
