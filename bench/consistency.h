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
  // Consistency specs (server/consistency/), run in this order; empty: every clock-driven
  // controller of the registry at its defaults.
  std::vector<std::string> controllers;
};

int RunConsistencyBench(const ConsistencyBenchOptions& options);

}  // namespace hetps::bench
