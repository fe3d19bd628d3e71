// Optimizer: the server-side update rule applied to one partition for one (aggregated)
// gradient. Chosen by name (--optimizer=sgd|momentum|adam|adagrad); adding a rule is one file
// plus a line in optimizer.cc's registry.
//
// Thread-safety: Apply is const and keeps no state of its own; the caller owns the partition's
// values and slots and must not apply to one partition from two threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct OptimizerOptions {
  double lr = 0.01;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient
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

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& name,
                                                   const OptimizerOptions& options);
std::vector<std::string> OptimizerNames();

// One factory per rule, each in its own file.
std::unique_ptr<Optimizer> MakeSgd(const OptimizerOptions& options);
std::unique_ptr<Optimizer> MakeMomentum(const OptimizerOptions& options);
std::unique_ptr<Optimizer> MakeAdam(const OptimizerOptions& options);
std::unique_ptr<Optimizer> MakeAdagrad(const OptimizerOptions& options);

}  // namespace hetps
