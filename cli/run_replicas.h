// hetps launch --replicas=R (docs/replication.md): what a local run with standby servers needs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/launch_args.h"
#include "common/status.h"

namespace hetps {

// With --replicas=R among the scheduler's flags (`routed`: each role's flags): the number of
// standby servers to start on this host (R per server rank), and failure detection fast enough
// for a failover to pass in about a second (the scheduler's heartbeat timeout 1 s, the servers'
// interval 200 ms, the workers waiting 30 s for a rank) unless the flags say otherwise. 0
// without --replicas; refused with -H, --links=netns or --restart.
StatusOr<int> SetUpReplicas(const LaunchArgs& args,
                            std::map<std::string, std::vector<std::string>>& routed);

}  // namespace hetps
