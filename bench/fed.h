// `hetps-bench fed`: many federated edge clients (hetps-worker --workload=edge processes) on one
// machine, in sampled FedAvg rounds (servers run the consistency selected), plus one evaluator
// that measures only at the end, so it idles through the run like a client that is never
// selected. Sampled from /proc every 200 ms: the memory of every process of the cluster (PSS,
// which splits shared pages such as the mapped data set among their users, and RSS), and the
// evaluator's CPU between 30% and 90% of the run (an idle client's cost). From the scheduler's
// rounds log: aggregations per minute (under --clock=virtual: also the virtual seconds the rounds
// took). One JSON line.
#pragma once

#include <string>

namespace hetps::bench {

struct FedBenchOptions {
  int servers = 2;
  int clients = 100;
  int clients_per_round = 10;
  int rounds = 20;
  std::string model = "mlp";
  int heartbeat_timeout_ms =
      5000;  // the scheduler's; starting 1000 processes on 2 cores needs more
  // "virtual": --clock=virtual (docs/virtual-time.md) with the hetero scenario's devices and
  // links (deploy/edge/hetero100.flags): the run's time is virtual, and wall_s is the host's.
  std::string clock = "wall";
};

int RunFedBench(const FedBenchOptions& options);

}  // namespace hetps::bench
