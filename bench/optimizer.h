// `hetps-bench optimizer`: how fast each server-side optimizer applies a gradient to a partition
// on one thread (GB/s of float32 gradient), in the vector instructions the server uses and in
// the baseline copy of the same loop, with a memcpy of the same bytes measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetps::bench {

struct OptimizerBenchOptions {
  std::vector<std::string> optimizers = {"sgd", "momentum", "adam", "adagrad"};
  std::vector<int64_t> kib = {1024, 16384};  // partition sizes in KiB
  double seconds = 1;                        // per measured figure
};

// Prints one JSON object per optimizer and size; returns the process exit code.
int RunOptimizerBench(const OptimizerBenchOptions& options);

}  // namespace hetps::bench
