// Optimizer: the server-side update rule applied to one partition for one (aggregated)
// gradient. Chosen by a spec string (--optimizer=adam:lr=1e-3,beta1=0.9) from the registry
// below; adding a rule is one file with its Register function, one line in optimizers.def, and
// its test.
//
// Thread-safety: Apply is const and keeps no state of its own; the caller owns the partition's
// values and slots and must not apply to one partition from two threads at once.
//
// Vector instructions: a rule writes its loop once, inside RunVectorized (server/vectorized.h),
// which runs it compiled for AVX2 where the CPU has it, bit-identical to the baseline copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/status.h"
#include "server/vectorized.h"

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

  // Sparse tables (ALGORITHMS.md §10): the same rule applied row by row, lazily (only the rows
  // of a push change). A row of `dim` floats keeps RowStateFloats(dim) floats of state (zero
  // at first). The default keeps the dense rule's slots one after the other and applies the
  // dense rule to the row, for rules whose step count does not matter; a rule with row-wise
  // state of its own (row-wise Adagrad, lazy Adam's per-row step) overrides both.
  virtual int64_t RowStateFloats(int64_t dim) const { return num_slots() * dim; }
  virtual void ApplyRow(float* w, const float* g, int64_t dim, float* state, float scale) const {
    float* slots[4];
    for (int k = 0; k < num_slots() && k < 4; ++k) slots[k] = state + k * dim;
    Apply(w, g, dim, slots, 1, scale);
  }
};

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
