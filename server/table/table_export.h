// Export of a sparse table for serving (docs/tables.md; the scheduler's side is
// scheduler/table_exports.h). Each bucket of the table a server holds is written to
// <dir>/bucket-<b>.rows (b: the bucket's index in the table, 5 digits), little-endian:
//
//   header, 48 bytes: "HETPSEXP", u32 format (1), u32 dim, u32 bucket, u32 buckets, u32 full,
//                     u32 0, u64 tombstones, u64 rows
//   tombstones x u64 key
//   rows x (u64 key, dim x f32)
//
// A delta (full = 0) holds every row pushed since the bucket's previous export, with its value
// now, and a tombstone for every key dropped since (evicted or expired): a serving copy removes
// the tombstones' keys, then upserts the rows. A full file holds every row of the bucket and
// replaces what the copy had of it. Applying a file twice changes nothing; skipping one is
// mended by the next full export. Files are written under a temporary name, synced and renamed.
#pragma once

#include <string>

#include "common/status.h"
#include "hetps.pb.h"
#include "hetps/shard_map.h"
#include "server/partition_store.h"

namespace hetps {

inline constexpr char kExportMagic[8] = {'H', 'E', 'T', 'P', 'S', 'E', 'X', 'P'};
inline constexpr uint32_t kExportFileFormat = 1;
inline constexpr size_t kExportHeaderBytes = 48;

// Writes this server's buckets of `request.table()` into `request.dir()`; the answer lists the
// files. On an error every bucket of the table here exports in full next time. REQUIRES: the
// calling thread owns the table's buckets (the network thread).
StatusOr<proto::TableExport> ExportTable(const ShardMap& map, PartitionStore& store,
                                         int32_t server_rank, const proto::TableExport& request);

// The export failed elsewhere: each bucket of `table` here exports in full next time.
void CallOffExport(const ShardMap& map, PartitionStore& store, const std::string& table);

}  // namespace hetps
