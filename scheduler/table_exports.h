// TableExports: the scheduler's side of exporting a sparse table for serving (docs/tables.md).
// An operator's EXPORT (hetps ctl export) names a table and a dir; every live server writes its
// buckets of the table there (server/table/table_export.h) and answers with what each file
// holds; once all did, the scheduler writes MANIFEST.json beside them (the export is complete
// only then) and answers the operator with it.
//
// An export that fails anywhere (a server cannot write, or dies) is called off on every server
// asked: each of their buckets exports in full next time, so a serving copy that applies the
// next export loses nothing of the rows the failed one had taken off the servers' books.
// One export of a table at a time.
//
// Thread-safety: none; owned by the scheduler's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps.pb.h"
#include "hetps/shard_map.h"
#include "scheduler/barrier.h"

namespace hetps {

inline constexpr char kExportManifestName[] = "MANIFEST.json";
inline constexpr int kExportFormat = 1;

class TableExports {
 public:
  struct Actions {
    std::function<void(int32_t server, const proto::Header& h)> send;
    std::function<void(const Arrival& to, const proto::Header& h)> reply;  // to an operator
    std::function<std::vector<int32_t>()> live_servers;
  };
  explicit TableExports(Actions actions) : actions_(std::move(actions)) {}
  TableExports(const TableExports&) = delete;
  TableExports& operator=(const TableExports&) = delete;

  // An operator's request; `map`: the installed shard map, or null. Answered with EXPORT once
  // complete, or with an error (at once when it cannot start).
  void Request(const Arrival& requester, const proto::TableExport& request, const ShardMap* map,
               double now);
  // A server's EXPORT_DONE, or its ERROR carrying table_export.
  void OnAnswer(int32_t server, const proto::Header& h, double now);
  void OnServerDead(int32_t server);
  // The cluster shuts down: operators still waiting are told so.
  void Shutdown();

 private:
  struct Attempt {
    Arrival requester;
    proto::TableExport manifest;
    std::set<int32_t> asked, waiting;
    Status failed;
    double started = 0;
  };
  void Finish(uint64_t id, double now);
  // Calls the export off on the servers asked and answers the operator with `why`.
  void Fail(uint64_t id, const Status& why);

  Actions actions_;
  std::map<uint64_t, Attempt> attempts_;  // by the request id the servers were sent
  uint64_t next_id_ = 1;
};

}  // namespace hetps
