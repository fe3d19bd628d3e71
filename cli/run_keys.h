// Secure by default: a local `hetps launch` (one machine, or its network namespaces) makes keys
// for the run and starts every role with them, so no other local user can join the cluster as a
// worker, read or write the model, or switch its policy. The keys live in <run>/keys (mode 0700,
// the .key files 0600; a resumed run keeps its own), where `hetps status|ctl|health
// --run_dir=RUN` finds them with the scheduler's endpoint. --insecure (or --auth on any role, or
// HETPS_AUTH) leaves the run as asked; a run across hosts (-H) names its keys itself.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/launch_args.h"
#include "common/status.h"

namespace hetps {

// The run's files `hetps status|ctl|health --run_dir` reads.
std::string RunKeysDir(const std::string& run_dir);
std::string RunEndpointFile(const std::string& run_dir);

// Whether any of `flags` asks for a run without authentication (--insecure, --insecure=true).
bool AsksInsecure(const std::vector<std::string>& flags);

// Makes the run's keys when it needs them and puts --auth=curve --keys=<run>/keys first in every
// role's flags; returns what to tell the operator (empty: nothing). Leaves `routed` alone for
// runs across hosts, runs that chose their authentication, and --insecure ones.
StatusOr<std::string> SecureLocalRun(const LaunchArgs& args, const std::string& run_dir,
                                     std::map<std::string, std::vector<std::string>>& routed);

}  // namespace hetps
