// `hetps-bench aggregation`: synchronous rounds (push, clock, pull of one tensor by every
// worker, bsp) with the workers pushing directly and through the aggregation tier
// (docs/aggregation-tier.md), in one run, per placement: host-local (the workers and their
// aggregator on this host, the server behind its link) and switch emulation (each worker on a
// host of its own behind the bridge, the aggregator on the bridge streaming fixed-point
// chunks); one JSON object per tensor size with each placement's round time and server-link
// bytes as ratios to direct pushes in the same topology.
#pragma once

#include <string>
#include <vector>

namespace hetps::bench {

struct AggregationBenchOptions {
  int workers = 8;
  std::vector<double> mb = {0.9, 16};  // tensor sizes (0.9 MB: the MLP's gradient)
  int rounds = 8;                      // measured rounds per placement, after one warm-up
  // "netns": the server on its own emulated host (a network namespace behind a bridge, its
  // link limited to link_mbps each way with tc tbf); "none": everything on loopback.
  std::string links = "netns";
  double link_mbps = 1000;
  int64_t partition_bytes = 4 << 20;
  int switch_chunk = 16384;  // switch emulation: words per chunk, slots per partition
  int switch_slots = 8;
};

int RunAggregationBench(const AggregationBenchOptions& options);

}  // namespace hetps::bench
