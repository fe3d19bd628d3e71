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
  // Consistency specs (server/consistency/), run in this order.
  std::vector<std::string> controllers = {"bsp",
                                          "ssp:staleness=3",
                                          "dssp:lower=3,range=12",
                                          "backup:backups=1",
                                          "softsync:n=1",
                                          "semi_async",
                                          "asp"};
};

int RunConsistencyBench(const ConsistencyBenchOptions& options);

}  // namespace hetps::bench
