// hetps launch with --aggregators=N (docs/aggregation-tier.md): the aggregation tier's processes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/hosts.h"
#include "cli/launch_args.h"
#include "common/local_cluster.h"
#include "common/status.h"

namespace hetps {

// With --aggregators=N among the scheduler's flags (`routed`: each role's flags): N
// hetps-aggregator processes with the aggregator's flags, host-local: on this host (a local
// run), or with -H on the first N hosts that run workers (each binds every address and is
// dialled at its host's), so every worker on those hosts pushes through its host's. Refused
// with --links=netns (each client there is a host of its own) and when -H gives fewer hosts
// with workers than N. Returns N.
StatusOr<int> SetUpAggregators(const LaunchArgs& args,
                               const std::map<std::string, std::vector<std::string>>& routed,
                               LocalClusterOptions& cluster);
// The host index aggregator `index` runs on (-H): the index-th host that runs workers.
int AggregatorHost(const Placement& placement, int index);

}  // namespace hetps
