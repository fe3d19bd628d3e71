// `hetps-bench train`: real training (hetps-worker --workload=train processes on a benchmark
// cluster, one of them optionally a straggler), measured from the run folder they write:
// samples per second and the wall time until rank 0 first measured the target test accuracy.
#pragma once

#include <string>
#include <vector>

namespace hetps::bench {

struct TrainBenchOptions {
  int servers = 2;
  int workers = 4;
  std::string model = "mlp";
  std::string consistency = "ssp:staleness=2";  // a consistency spec
  double straggler_slowdown = 1;  // > 1: the last worker computes this many times longer
  // Every worker's straggler process (worker/train/straggler.h; hetps-worker --straggler).
  std::string straggler = "none";
  int iterations = 1500;  // per worker
  int eval_every = 50;
  double target = 0.85;
  std::string device = "cpu";  // the workers' --device: cpu or cuda
  std::string codec;           // the workers' --codec ("" keeps their default)
  // The servers' durability levels, each run on a fresh cluster: memory (no data dir), none,
  // process, machine; with memory among several, each level's median samples/s is also
  // printed as a ratio to memory's. `repeats` rounds of all levels, interleaved.
  std::vector<std::string> durability = {"memory"};
  int repeats = 1;
  // The aggregation tier (docs/aggregation-tier.md): each count of host-local aggregators is a
  // run of its own, interleaved with the others; with more than one, every repeat takes its own
  // --data_seed (1, 2, ...) and the median time to target per count is compared.
  std::vector<int> aggregators = {0};
  // "netns": the servers on their own emulated host, its link limited to link_mbps each way
  // (bench/server_host.h; needs root); "none": loopback.
  std::string links = "none";
  double link_mbps = 1000;
};

int RunTrainBench(const TrainBenchOptions& options);

}  // namespace hetps::bench
