// hetps-bench failover: what replication (--replicas=1, docs/replication.md) costs and what it
// buys, on this machine.
//  - throughput: a worker keeps `in_flight` pushes of a `mb` MiB tensor (two servers, 4 MiB
//    partitions) going for `seconds`, once without backups and once with a standby per rank
//    (every record shipped to it before the push is acknowledged); JSON per size with both
//    figures and `r1_vs_r0`, their ratio, measured in one run;
//  - stall: two workers push the same tensor (waited, one at a time) while the primary of rank
//    0 is SIGKILLed and nothing restarts it; `stall_s` is the longest gap between two completed
//    pushes of any worker (failure detection, promotion, the workers' re-sends), `exact` whether
//    the values are exactly the acknowledged pushes' sum afterwards.
#pragma once

#include <vector>

namespace hetps::bench {

struct FailoverBenchOptions {
  std::vector<int> mib = {16};
  double seconds = 3;
  int in_flight = 4;
  int heartbeat_timeout_ms = 800;  // the scheduler's failure detection in the stall run
};

int RunFailoverBench(const FailoverBenchOptions& o);

// hetps-bench move: a server rank moved to a new process while two workers push a `mib` MiB
// tensor (two servers, --replicas=1, no standby at first): a standby is started into the
// running cluster and copies the rank while training goes on (`sync_s`, and `sync_stall_s`, the
// longest gap between two completed pushes of a worker meanwhile), then `hetps ctl
// drain-server` hands the rank to it (`drain_s`, the command's time, and `drain_stall_s`, the
// pause the workers saw); `exact`: the values equal the acknowledged pushes' sum afterwards.
int RunMoveBench(const std::vector<int>& mib);

}  // namespace hetps::bench
