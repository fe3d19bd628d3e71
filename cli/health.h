// `hetps health [--scheduler=tcp://host:port] [--role=server|worker --rank=R] [--timeout_ms=T]`:
// a health check for containers and supervisors. Healthy (exit 0) when the scheduler answers
// and, with --role and --rank, when it counts that node alive; unhealthy (exit 1) otherwise,
// saying why. --scheduler defaults to $HETPS_SCHEDULER, as the daemons' own flags do.
#pragma once

#include <string>
#include <vector>

#include "cli/scheduler_call.h"
#include "common/status.h"

namespace hetps {

struct HealthArgs {
  std::string scheduler;
  OperatorAuth auth = OperatorAuth::FromEnvironment();
  std::string role;  // "", "server" or "worker"
  int rank = -1;
  int timeout_ms = 2000;
};

// `scheduler_env`: $HETPS_SCHEDULER (null when unset).
StatusOr<HealthArgs> ParseHealthArgs(const std::vector<std::string>& args,
                                     const char* scheduler_env);
// Whether the node the args name is alive in the scheduler's status document (its JSON, as
// /api/status serves it); ok when no node is named. The error says why not.
Status CheckHealth(const HealthArgs& args, const std::string& status_json);
// Asks the scheduler, prints "healthy: ..." or "unhealthy: ...", returns the exit code.
int RunHealth(const HealthArgs& args);

}  // namespace hetps
