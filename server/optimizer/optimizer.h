// Optimizer: the server-side update rule applied to one partition for one (aggregated)
// gradient. Chosen by a spec string (--optimizer=adam:lr=1e-3,beta1=0.9) from the registry
// below; adding a rule is one file with its Register function, one line in optimizers.def, and
// its test.
//
// Thread-safety: Apply is const and keeps no state of its own; the caller owns the partition's
// values and slots and must not apply to one partition from two threads at once.
//
// Vector instructions: a rule writes its loop once, inside RunVectorized (below). The loop is
// compiled for the x86-64 baseline (SSE2) and again for AVX2, and the AVX2 copy runs where the
// CPU has it. Both copies give bit-identical results: the loops are elementwise, the compiler
// neither reorders nor fuses their arithmetic (AVX2 is taken without FMA), and sqrt and division
// are correctly rounded in every width. A rule whose loop takes a square root has its file
// compiled with -fno-math-errno (server/CMakeLists.txt; the rules never read errno), without
// which the sqrt would keep the loop scalar.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/status.h"

namespace hetps {

// The hyper-parameters of every rule, read by name from a spec (FromSpec); a rule uses its own.
struct OptimizerOptions {
  double lr = 0.01;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient
  // The parameters `spec` has, by name; the others keep their defaults above.
  static OptimizerOptions FromSpec(const AlgorithmSpec& spec);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Per-parameter state arrays this rule keeps (momentum: 1, adam: 2).
  virtual int num_slots() const = 0;
  // w <- update(w, scale * g). `slots` holds num_slots() arrays of n floats (zero at first);
  // `step` is the 1-based count of updates applied to this partition, this one included.
  virtual void Apply(float* w, const float* g, int64_t n, float* const* slots, int64_t step,
                     float scale) const = 0;
};

// The instruction set the rules' loops run with in this process.
enum class SimdPath { kBaseline, kAvx2 };
SimdPath ActiveSimdPath();
const char* SimdPathName(SimdPath path);  // "avx2", "sse2" (x86-64's baseline) or "baseline"
// true: the loops run their baseline copy even where the CPU has AVX2 (tests and `hetps-bench
// optimizer` compare the two in one process); false: the widest the CPU has (the default).
void LimitSimdToBaseline(bool limit);

namespace simd_internal {
// `flatten` inlines the rule's loop into each copy, so that it is compiled with that copy's
// instruction set. The loop is taken by value: its captures are then a local copy no pointer of
// the partition can alias, which the vectorizer needs to see (clang gives up otherwise).
#if defined(__x86_64__) && defined(__GNUC__)
template <class Loop>
__attribute__((target("avx2"), flatten)) void RunAvx2(Loop loop) {
  loop();
}
#endif
template <class Loop>
__attribute__((flatten)) void RunBaseline(Loop loop) {
  loop();
}
}  // namespace simd_internal

// Runs `loop` (a lambda over the partition) in the copy ActiveSimdPath() names.
template <class Loop>
void RunVectorized(const Loop& loop) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (ActiveSimdPath() == SimdPath::kAvx2) return simd_internal::RunAvx2(loop);
#endif
  simd_internal::RunBaseline(loop);
}

struct OptimizerEntry {
  std::function<std::unique_ptr<Optimizer>(const AlgorithmSpec&)> make;
};
using OptimizerRegistry = Registry<OptimizerEntry>;
// Every rule (optimizers.def).
const OptimizerRegistry& Optimizers();
// Parses `spec` ("adam:lr=1e-3") and builds its rule.
StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& spec);

// The parameters every rule takes: lr and weight_decay.
std::vector<ParamDef> CommonOptimizerParams();

#define HETPS_OPTIMIZER(Name) void Register##Name(OptimizerRegistry& r);
#include "server/optimizer/optimizers.def"
#undef HETPS_OPTIMIZER

}  // namespace hetps
