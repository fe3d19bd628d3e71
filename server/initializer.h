// Initializer: where a partition's first values come from (--init).
//   zeros | uniform (in [-scale, scale)) | normal (mean 0, std scale) | worker
// Seeded rules are counter-based: element j of tensor T gets f(seed, T, j), so the model's
// initial values do not depend on how many servers there are or how the map cut the tensor.
// `worker`: partitions start empty and the first INIT a worker sends sets them.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace hetps {

struct InitOptions {
  std::string mode = "uniform";
  double scale = 0.01;
  uint64_t seed = 1;
};

class Initializer {
 public:
  static StatusOr<Initializer> Make(const InitOptions& options);
  bool from_worker() const { return options_.mode == "worker"; }
  // Fills out[0..n) with the values of elements [offset, offset + n) of `tensor`.
  // REQUIRES: !from_worker().
  void Fill(const std::string& tensor, int64_t offset, float* out, int64_t n) const;

 private:
  explicit Initializer(InitOptions options) : options_(std::move(options)) {}
  InitOptions options_;
};

}  // namespace hetps
