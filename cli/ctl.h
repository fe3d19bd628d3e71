// `hetps ctl --scheduler=tcp://host:port set consistency=SPEC`: changes the cluster's policy
// while it trains. SPEC is a consistency spec of the controller registry, e.g. `ssp:staleness=4`,
// `dssp:lower=2`, `backup:backups=auto`, `semi_async:quorum=3` (`hetps-server --list` shows them
// all); parameters left out take their registered defaults. The scheduler passes the change to
// every server, each validates it (against its aggregator too) and switches at once (nothing
// held is lost), and the command returns when all have, or with the first refusal.
//
// `hetps ctl --scheduler=... checkpoint`: a whole-run checkpoint now (scheduler/checkpoints.h):
// a consistent cut of the model at one clock on every server, in the scheduler's
// --checkpoint_dir; returns once it is complete, printing its clock and folder.
//
// `hetps ctl --scheduler=... export --table=NAME --out=DIR [--full]`: a sparse table's rows for
// serving (scheduler/table_exports.h, server/table/table_export.h): every server writes its
// buckets into DIR (made absolute here), then the scheduler MANIFEST.json; prints the totals.
//
// `hetps ctl --scheduler=... drain-server --rank=N`: hands server rank N to its backup (a
// replicated cluster, --replicas >= 1, with a standby that holds the rank): the primary stops
// taking requests, its backups acknowledge every update it took, it is retired (it exits) and
// the backup serves the rank; the workers resend what waited. Returns once the backup serves.
// Without backups, in an elastic cluster (--max_servers): the rank's partitions move to the
// other ranks, the rank is retired and its server exits (docs/resharding.md).
//
// `hetps ctl --scheduler=... move --partitions=P[,P...] --to=RANK`: live re-sharding
// (docs/resharding.md): the partitions' servers ship them to rank RANK while serving the rest,
// then the shard map's next epoch places them there and the workers follow it. Returns once the
// partitions serve from RANK.
#pragma once

#include <string>
#include <vector>

#include "cli/scheduler_call.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

struct CtlArgs {
  enum class Command { kSet, kCheckpoint, kExport, kDrain, kMove };
  Command command = Command::kSet;
  std::string scheduler;
  OperatorAuth auth = OperatorAuth::FromEnvironment();
  proto::Policy policy;        // kSet
  proto::TableExport exports;  // kExport: table, dir (absolute), full
  int rank = -1;               // kDrain; kMove: the target
  proto::Move move;            // kMove: the entries
  // kCheckpoint and kExport: 600000 unless given (writing a large model takes time)
  int timeout_ms = 10000;
};

StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& args);
// Sends the request and waits for the scheduler's answer; returns the line to print.
StatusOr<std::string> RunCtl(const CtlArgs& args);

}  // namespace hetps
