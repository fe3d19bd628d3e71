// ValueLog: where a data dir's logged update values go (server/durable_store.h), out of
// RocksDB's write-ahead log. RocksDB keeps each log record with a ValueRef (segment, offset,
// length, XXH3 hash); the floats go into a ring of preallocated segment files. Appending is a
// hash (XXH3 through xxhash's run-time dispatch to the widest vector unit: no CRC32C in
// software, as Debian's RocksDB has) and a pwrite into the page cache: no memtable copy, and
// once a file's pages are cached no new file blocks (appending to a fresh file runs at about a
// fifth of overwriting cached pages on this kind of machine). pwrite, not a store into a
// shared mapping: such a store faults on every page that writeback cleaned since it was last
// written, a fault per 4 KiB; the pwrite path took the 16 MiB push with process durability
// from 0.45 to about 0.6 of the in-memory throughput. Recovery reads through a mapping.
//
// A segment is reused only when every value in it is dead: its partition has a checkpoint past
// the value's log sequence number (the `dead` callback); `before_reuse` runs first (the store
// syncs RocksDB's log there). When no segment is free the caller keeps the values in RocksDB.
//
// What a value in the ring survives: a killed process (the pages belong to the page cache);
// a machine crash only after Sync (machine durability syncs every value before its record).
// Syncing the ring before each reuse would make every process-durability value survive a
// machine crash too, but puts the disk's write-back in the push path (measured: 0.08 of the
// in-memory push throughput instead of 0.5 then), so it is not done. Each entry carries its hash,
// so a value that did not reach the disk is detected, never replayed as garbage.
//
// Thread-safety: Append and Sync may be called from any thread at once (different partitions'
// owners); Read only before the first Append (recovery).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"

namespace hetps {

class ValueLog {
 public:
  struct Options {
    int segments = 4;
    int64_t segment_bytes = int64_t{64} << 20;
    // Whether value `lsn` of partition `pid` is dead (covered by a checkpoint).
    std::function<bool(int32_t pid, uint64_t lsn)> dead;
    // Runs before a segment is written over (under the log's lock).
    std::function<Status()> before_reuse;
  };
  // Opens (creating) the ring in `dir`; existing segments are mapped as they are. Which values
  // in them are live is what the store's log records say: recovery calls Hold for each.
  static StatusOr<std::unique_ptr<ValueLog>> Open(const std::string& dir, Options options);
  ~ValueLog();
  ValueLog(const ValueLog&) = delete;
  ValueLog& operator=(const ValueLog&) = delete;

  // Copies `bytes` bytes (value `lsn` of partition `pid`) into the ring; nullopt when no
  // segment is free (or the value does not fit one), or an error from before_reuse.
  StatusOr<std::optional<proto::ValueRef>> Append(int32_t pid, uint64_t lsn, const void* data,
                                                  int64_t bytes);
  // The same for a value made of `parts`, one after the other (e.g. a message's encoded
  // fields and the raw arrays it holds, without building it first).
  StatusOr<std::optional<proto::ValueRef>> Append(int32_t pid, uint64_t lsn,
                                                  const std::vector<std::string_view>& parts);
  // Writes the entry's pages to disk (machine durability).
  Status Sync(const proto::ValueRef& ref);
  // The entry's bytes, checked against its hash and header; valid while the log is open.
  StatusOr<const char*> Read(const proto::ValueRef& ref, int32_t pid, uint64_t lsn) const;
  // Recovery: a live log record refers to `ref` (its segment is not reused while it is live).
  void Hold(const proto::ValueRef& ref, int32_t pid, uint64_t lsn);

  int64_t reuses() const;  // segments written over so far (a benchmark's figure)

 private:
  ValueLog(std::string dir, Options options) : dir_(std::move(dir)), options_(std::move(options)) {}
  Status MapSegments();
  // Makes a free segment the active one; false when none is.
  StatusOr<bool> Rotate();

  std::string dir_;
  Options options_;
  std::vector<int> fds_;
  std::vector<char*> maps_;
  mutable std::mutex mu_;
  int active_ = -1;     // none until the first Append
  int64_t offset_ = 0;  // next write position in the active segment
  // Per segment, the highest log sequence number of each partition with a value in it.
  std::vector<std::map<int32_t, uint64_t>> holds_;
  int64_t reuses_ = 0;
};

}  // namespace hetps
