// `hetps ctl --scheduler=tcp://host:port set key=value ...`: changes the cluster's policy while
// it trains. Keys: consistency (asp|bsp|ssp|dssp|backup|softsync|semi_async), staleness,
// dssp_lower, dssp_range, backup_workers (b or auto), softsync_n, quorum (K or auto); a key left
// out takes the servers' flag default (staleness 2, dssp_lower 3, dssp_range 12, backup_workers 1,
// softsync_n 1, quorum auto). The scheduler
// passes the change to every server, each switches at once (nothing held is lost), and the
// command returns when all have, or with the first refusal.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

struct CtlArgs {
  std::string scheduler;
  proto::Policy policy;
  int timeout_ms = 10000;
};

StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& args);
// Sends the change and waits for the scheduler's answer.
Status RunCtl(const CtlArgs& args);

}  // namespace hetps
