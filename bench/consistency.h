// `hetps-bench consistency`: every consistency controller over the same synthetic workload
// with one straggler, one JSON object per controller.
#pragma once

#include <string>
#include <vector>

namespace hetps::bench {

struct ConsistencyBenchOptions {
  int servers = 2;
  int workers = 4;
  double straggler_slowdown = 3;  // the last worker computes this many times longer
  double seconds = 5;             // per controller
  double compute_ms = 10;         // simulated compute per iteration of a normal worker
  std::vector<std::string> controllers = {"bsp",      "ssp",        "dssp", "backup",
                                          "softsync", "semi_async", "asp"};
  int staleness = 3;  // ssp
  int dssp_lower = 3, dssp_range = 12;
  int backup_workers = 1;
  int softsync_n = 1;
};

int RunConsistencyBench(const ConsistencyBenchOptions& options);

}  // namespace hetps::bench
