// `hetps status --scheduler=tcp://host:port [--watch[=SECONDS]] [--json]`: the cluster at a
// glance, like `top`: every worker's clock, iteration time, gate wait, staleness, bytes and
// straggler flag; every server's load; every layer's update rate. It asks the scheduler over
// its control socket (no HTTP needed), so it works wherever `hetps ctl` does.
#pragma once

#include <string>
#include <vector>

#include "cli/scheduler_call.h"
#include "common/status.h"

namespace hetps {

struct StatusArgs {
  std::string scheduler;
  OperatorAuth auth = OperatorAuth::FromEnvironment();
  double watch_s = 0;  // > 0: refresh every watch_s seconds until interrupted
  bool json = false;   // print the raw JSON (what /api/status serves) instead of tables
  int timeout_ms = 5000;
};

StatusOr<StatusArgs> ParseStatusArgs(const std::vector<std::string>& args);
// Asks the scheduler for its status JSON.
StatusOr<std::string> FetchStatus(const std::string& scheduler, const OperatorAuth& auth,
                                  int timeout_ms);
// The tables `hetps status` prints for a status JSON document.
StatusOr<std::string> RenderStatus(const std::string& status_json);
// Prints once, or refreshes until SIGINT/SIGTERM with --watch; returns the exit code.
int RunStatus(const StatusArgs& args);

}  // namespace hetps
