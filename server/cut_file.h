// A server's part of a whole-run checkpoint (a cut, common/cut.h): RocksDB SST files in the
// cut's folder, one per partition owner thread, server-<rank>-<owner>.sst. Keys: "meta" (a
// CutFileMeta) and "p" + the big-endian partition id (a PartitionCheckpoint: values, optimizer
// slots, version, held updates, aggregator state). SST blocks carry checksums, verified when
// read, so a truncated or damaged file is refused with its name, never loaded as zeros.
//
// Thread-safety: WriteCutFile reads partitions, so it runs on their owning thread; different
// owners write their own files at once. A CutReader is used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cut.h"
#include "common/status.h"
#include "durable.pb.h"

namespace rocksdb {
class SstFileReader;
}

namespace hetps {

class PartitionStore;

std::string CutFileName(const std::string& cut_dir, int server_rank, int owner);

// Writes `meta` and partitions `ids` (ascending) of `store` into `path` (through a temporary
// name, renamed once whole); returns the file's size in bytes.
StatusOr<int64_t> WriteCutFile(const std::string& path, proto::CutFileMeta meta,
                               PartitionStore& store, const std::vector<int32_t>& ids);

// One cut being written by a server's partition owners: each writes its own file (Write) on
// its own thread; the network thread polls done() and then reads status() and bytes().
class CutJob {
 public:
  CutJob(std::string dir, proto::CutFileMeta meta, int owners)
      : dir_(std::move(dir)), meta_(std::move(meta)), remaining_(owners) {}
  // Writes owner `owner`'s partitions `ids` (the calling thread owns them); counts it done.
  void Write(PartitionStore& store, int owner, const std::vector<int32_t>& ids);
  bool done() const { return remaining_.load() == 0; }
  int64_t bytes() const { return bytes_.load(); }
  int64_t clock() const { return meta_.clock(); }
  const std::string& dir() const { return dir_; }
  // The first owner's error, if any. REQUIRES: done().
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  const std::string dir_;
  const proto::CutFileMeta meta_;
  std::atomic<int> remaining_;
  std::atomic<int64_t> bytes_{0};
  mutable std::mutex mu_;
  Status status_;
};

class CutReader {
 public:
  // Opens server `server_rank`'s files in `cut_dir`, verifying every block's checksum; they
  // must agree on the clock and the shard map.
  static StatusOr<std::unique_ptr<CutReader>> Open(const std::string& cut_dir, int server_rank);
  ~CutReader();
  CutReader(const CutReader&) = delete;
  CutReader& operator=(const CutReader&) = delete;

  const proto::CutFileMeta& meta() const { return meta_; }
  // Partition `pid`'s saved state; NotFound when no file holds it.
  StatusOr<proto::PartitionCheckpoint> Read(int32_t pid) const;

 private:
  CutReader() = default;
  std::string dir_;
  proto::CutFileMeta meta_;
  std::vector<std::unique_ptr<rocksdb::SstFileReader>> files_;
};

// Per-worker state in a partition checkpoint is keyed by node id, and a resumed run gives its
// workers new ids: rewrites each saved id by `ids` (old -> new) and drops state of workers
// without one (they are not in the resumed run). Exactly-once records belong to client
// incarnations that no longer exist and are dropped too.
void RemapWorkers(proto::PartitionCheckpoint& part, const std::map<int32_t, int32_t>& ids);

}  // namespace hetps
