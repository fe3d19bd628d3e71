// One request to a scheduler from the operator's command (hetps ctl, hetps status): the CLI is
// not a node, so it talks over a fresh DEALER socket and waits for one reply.
#pragma once

#include <string>

#include "common/auth.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

// The operator's key options: --auth, --keys and --key, each defaulting to HETPS_AUTH,
// HETPS_KEYS and HETPS_KEY (so a container's health check uses the keys its daemon uses). The
// key defaults to "operator"; any listed key may be used, and the scheduler decides what it
// may do (the status: any; ctl: operator keys only).
struct OperatorAuth {
  AuthFlags flags;
  std::string run_dir;  // --run_dir=RUN: a run of `hetps launch` (cli/run_keys.h)
  // Reads the environment's defaults.
  static OperatorAuth FromEnvironment();
  // Takes `arg` when it is one of --auth=, --keys=, --key=, --run_dir=; false otherwise.
  bool TakeArg(const std::string& arg);
  // With --run_dir: `scheduler` (when empty) from the run's endpoint file, and the run's own
  // keys (when the run has them and no --auth was given). Fails when the run's folder has no
  // endpoint to read.
  Status UseRun(std::string& scheduler);
  // The loaded keys (none when --auth is none).
  StatusOr<Auth> Load() const;
};

// Sends `request` (sender -1, request id 1) to `scheduler` and returns the reply header, or
// DEADLINE_EXCEEDED after `timeout_ms`, or the typed error the scheduler answered with.
StatusOr<proto::Header> CallScheduler(const std::string& scheduler, const OperatorAuth& auth,
                                      proto::Header request, int timeout_ms);

}  // namespace hetps
