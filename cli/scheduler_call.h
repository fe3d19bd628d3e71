// One request to a scheduler from the operator's command (hetps ctl, hetps status): the CLI is
// not a node, so it talks over a fresh DEALER socket and waits for one reply.
#pragma once

#include <string>

#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

// Sends `request` (sender -1, request id 1) to `scheduler` and returns the reply header, or
// DEADLINE_EXCEEDED after `timeout_ms`, or the typed error the scheduler answered with.
StatusOr<proto::Header> CallScheduler(const std::string& scheduler, proto::Header request,
                                      int timeout_ms);

}  // namespace hetps
