// A data dir kept in RocksDB (a server's shards, the scheduler's membership): what opening one
// accepts. A folder that is absent or empty is a new data dir (created here); one that holds a
// RocksDB database (its CURRENT file) is an existing one; anything else, or a file, is refused
// with an error naming it, so a wrong path is never taken for an empty model or cluster.
#pragma once

#include <string>

#include "common/status.h"

namespace hetps {

// Whether `dir` is new (true; now created) or existing (false). `what` names it in errors,
// e.g. "data dir" or "scheduler data dir".
StatusOr<bool> PrepareDataDir(const std::string& dir, const std::string& what);

}  // namespace hetps
