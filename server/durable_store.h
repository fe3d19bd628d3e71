// DurableStore: a server's partitions in RocksDB (--data_dir), so a killed or restarted server
// loses nothing it acknowledged. Two kinds of records, per partition:
//   log        every update (push, init, round; reads for aggregators that remember them) in
//              the order the partition's owning thread served it, written before its reply
//   checkpoint the partition's whole state (PartitionState::Save) after some log record; it
//              replaces the log up to that record in one atomic write
// Recovery loads the checkpoint and replays the log after it through the same serving code,
// which is deterministic per partition (one owning thread, one order). Exactly-once rides on
// the log: a push's (incarnation, seq) is in its own record, so what was applied and the
// memory of having applied it are written together.
//
// Large values (update values and checkpoints of 64 KiB and more) are kept in a value log
// (server/value_log.h), RocksDB holding the record and a reference; the ring being full, update
// values go into a spill file per partition, and checkpoints into files of their own (raw
// arrays, read back straight into the partitions at recovery).
//
// Durability levels (what an acknowledgement promises):
//   none     nothing per update; checkpoints every interval and at a clean stop
//   process  the update is in RocksDB's write-ahead log (the OS's page cache) before its reply,
//            its values (64 KiB and more) in the value log's mapped pages: a killed server
//            loses nothing acknowledged. A machine crash may: a logged value that did not reach
//            the disk fails its hash at recovery and its partition's log ends before it (with a
//            warning); a checkpoint that did not is refused at start, naming the data dir
//   machine  the value log's pages and then the write-ahead log are synced (concurrent writers
//            share one log sync) before the reply: a power loss loses nothing acknowledged
//
// Thread-safety: Append, Checkpoint and Recover of one partition come from its owning thread
// only; different partitions may be written or recovered from different threads at once
// (RocksDB is thread-safe).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"

namespace rocksdb {
class DB;
}

namespace hetps {

class PartitionState;
class ValueLog;

enum class Durability { kNone, kProcess, kMachine };
StatusOr<Durability> ParseDurability(const std::string& text);
const char* DurabilityName(Durability d);

class DurableStore {
 public:
  // Opens the data dir, creating it when it is absent or empty. A folder that holds anything
  // else than a hetps data dir, or a damaged one, is refused with an error naming it (never
  // read as an empty model).
  // `ring_segment_bytes`: the size of each of the value log's four segments (tests make it
  // small to fill the ring).
  static StatusOr<std::unique_ptr<DurableStore>> Open(const std::string& dir, Durability durability,
                                                      int64_t ring_segment_bytes = int64_t{64}
                                                                                   << 20);
  ~DurableStore();
  DurableStore(const DurableStore&) = delete;
  DurableStore& operator=(const DurableStore&) = delete;

  const std::string& dir() const { return dir_; }
  Durability durability() const { return durability_; }
  // Whose the data dir is (rank, shard map); nullopt for a new one.
  const std::optional<proto::DurableMeta>& meta() const { return meta_; }
  // Claims a new data dir for `meta` (synced). REQUIRES: meta() is nullopt.
  Status SetMeta(const proto::DurableMeta& meta);

  // Sizes the per-partition bookkeeping. REQUIRES: called once, before anything below.
  void Prepare(size_t num_partitions);
  // Logs an update of partition `pid` with its `n` float values (none: null, 0); returns once
  // it is as durable as the level promises (at once, writing nothing, under kNone).
  Status Append(int32_t pid, const proto::LogRecord& record, const float* values = nullptr,
                int64_t n = 0);
  // Writes `part`'s checkpoint and drops its log so far, atomically (synced under kMachine).
  Status Checkpoint(int32_t pid, const PartitionState& part);
  // Whether `pid` changed since its checkpoint, and the bytes logged since (0 under kNone).
  bool dirty(int32_t pid) const { return last_lsn_[pid] > checkpoint_lsn_[pid].load(); }
  int64_t log_bytes(int32_t pid) const { return log_bytes_[pid]; }

  // Loads `pid`'s checkpoint into `part` (if there is one) and hands every log record after it
  // to `replay` with its values (valid during the call), in order; returns how many records
  // were replayed.
  using Replay = std::function<Status(const proto::LogRecord&, const float* values, int64_t n)>;
  StatusOr<int64_t> Recover(int32_t pid, PartitionState& part, const Replay& replay);

 private:
  DurableStore(std::string dir, Durability durability);

  Status OpenValueLog(int64_t segment_bytes);
  // Reads the meta record into meta_ (none in a new data dir; `fresh`: the folder was empty).
  Status ReadMeta(bool fresh);
  // The bytes of `part`'s checkpoint record after log record `lsn`: the whole checkpoint when
  // it is small; else a reference to it in the value log or, the ring being full, in a
  // checkpoint file (whose name goes to `file`).
  StatusOr<std::string> CheckpointRecord(int32_t pid, uint64_t lsn, const PartitionState& part,
                                         std::string& file);
  // Recover's two steps: loads `pid`'s checkpoint (returning the lsn it covers; 0 for none),
  // then replays the log records after `after`.
  StatusOr<uint64_t> LoadCheckpoint(int32_t pid, PartitionState& part);
  StatusOr<int64_t> ReplayLog(int32_t pid, uint64_t after, const Replay& replay);
  // The values of log record `at`, kept apart (`ref`): read in place from the value log, or
  // into `copied` from the spill file. Null when they were lost below machine durability (the
  // log ends before them).
  StatusOr<const float*> ReadLoggedValue(int32_t pid, uint64_t at, const proto::ValueRef& ref,
                                         std::vector<float>& copied);
  // An update value the ring has no room for: written to partition `pid`'s spill file at its
  // next offset (from 0 again after each checkpoint, so the file's blocks are overwritten, not
  // new), hashed a chunk at a time, synced under kMachine.
  StatusOr<proto::ValueRef> Spill(int32_t pid, const void* data, int64_t bytes);
  // Reads a spilled value into `out`, checking its hash.
  Status ReadSpilled(int32_t pid, const proto::ValueRef& ref, std::vector<float>& out) const;
  // Checkpoints the value log has no room for go to files of their own (checkpoints/<pid>-<at>,
  // `at` = lsn + 1): the state without its arrays, then the arrays raw, written and read
  // straight from and into the partition's memory, hashed a chunk at a time.
  StatusOr<std::string> WriteCheckpointFile(int32_t pid, uint64_t lsn, const PartitionState& part);
  Status ReadCheckpointFile(const std::string& name, PartitionState& part,
                            proto::PartitionCheckpoint& meta) const;
  // Removes partition `pid`'s checkpoint files other than `keep` (a replaced one, or one a
  // crash left before its record was written).
  void RemoveCheckpointFiles(int32_t pid, const std::string& keep);

  std::string dir_;
  Durability durability_;
  std::unique_ptr<rocksdb::DB> db_;
  // Large update values go here instead of into RocksDB's log (server/value_log.h).
  std::unique_ptr<ValueLog> values_;
  std::optional<proto::DurableMeta> meta_;
  // Per partition, written by its owning thread only: the last log sequence number given out
  // and the last one its checkpoint covers (read by the value log from any thread).
  std::vector<uint64_t> last_lsn_;
  std::unique_ptr<std::atomic<uint64_t>[]> checkpoint_lsn_;
  size_t num_partitions_ = 0;
  std::vector<int64_t> log_bytes_;  // logged since the checkpoint
  // Per partition, its checkpoint file's name ("" for none), written by its owning thread; and
  // the files found at open, by partition, until its recovery removes the unused ones.
  std::vector<std::string> checkpoint_files_;
  std::vector<int64_t> spill_offset_;                          // per partition, owner thread only
  std::map<int32_t, std::vector<std::string>> files_at_open_;  // guarded by files_mu_
  std::mutex files_mu_;
};

}  // namespace hetps
