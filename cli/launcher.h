// Launcher: `hetps launch` runs a whole cluster (1 scheduler, S servers, W workers) on
// 127.0.0.1 as child processes on free ports. Every output line of a child is prefixed with
// its role and index. SIGINT/SIGTERM stop every child (SIGTERM, then SIGKILL after the grace
// period). A worker that fails is reported and the rest carry on, as the cluster tolerates
// it; a scheduler or server that fails while workers run stops the launch.
#pragma once

#include "cli/launch_args.h"

namespace hetps {

// Returns the process exit code: 0 when every worker finished with 0 and the scheduler and
// servers shut down cleanly; 1 naming the culprit(s) otherwise; 2 for bad arguments;
// 128 + signal when stopped by a signal.
int Launch(const LaunchArgs& args);

}  // namespace hetps
