#include "server/durable_store.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>

#include "common/data_dir.h"
#include "server/fault_point.h"
#include "server/partition_store.h"
#include "server/value_log.h"

namespace hetps {
namespace {

constexpr int kFormat = 1;
constexpr char kMetaKey[] = "m";
constexpr char kValueLogDir[] = "values";
// Values at least this large go to the value log: below it RocksDB's per-byte costs matter
// less than a record of their own.
constexpr int64_t kValueLogMinBytes = 64 << 10;

// Keys sort by partition, then by log sequence number: "c" pid, "l" pid lsn (big-endian).
void PutBigEndian(std::string& key, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) key.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::string CheckpointKey(int32_t pid) {
  std::string key = "c";
  PutBigEndian(key, static_cast<uint32_t>(pid), 4);
  return key;
}
std::string LogKey(int32_t pid, uint64_t lsn) {
  std::string key = "l";
  PutBigEndian(key, static_cast<uint32_t>(pid), 4);
  PutBigEndian(key, lsn, 8);
  return key;
}
uint64_t LsnOf(const rocksdb::Slice& key) {
  uint64_t lsn = 0;
  for (size_t i = 5; i < 13 && i < key.size(); ++i) {
    lsn = (lsn << 8) | static_cast<uint8_t>(key[i]);
  }
  return lsn;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status();
  return Status::Internal(fmt::format("{}: {}", what, s.ToString()));
}

}  // namespace

StatusOr<Durability> ParseDurability(const std::string& text) {
  if (text == "none") return Durability::kNone;
  if (text == "process") return Durability::kProcess;
  if (text == "machine") return Durability::kMachine;
  return Status::InvalidArgument(
      fmt::format("unknown durability '{}' (known: none, process, machine)", text));
}

const char* DurabilityName(Durability d) {
  switch (d) {
    case Durability::kNone:
      return "none";
    case Durability::kProcess:
      return "process";
    case Durability::kMachine:
      return "machine";
  }
  return "?";
}

DurableStore::DurableStore(std::string dir, Durability durability)
    : dir_(std::move(dir)), durability_(durability) {}

DurableStore::~DurableStore() {
  if (db_) (void)db_->Close();
}

StatusOr<std::unique_ptr<DurableStore>> DurableStore::Open(const std::string& dir,
                                                           Durability durability) {
  namespace fs = std::filesystem;
  auto prepared = PrepareDataDir(dir, "data dir");
  if (!prepared.ok()) return prepared.status();
  const bool fresh = *prepared;
  rocksdb::Options options;
  options.create_if_missing = fresh;
  options.error_if_exists = false;
  options.paranoid_checks = true;
  // An incomplete record at the end of the write-ahead log is a write that was never
  // acknowledged (the process died in it); damage anywhere else refuses the start.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  options.write_buffer_size = 256 << 20;  // log records usually die at the next checkpoint
  options.max_write_buffer_number = 3;
  options.compression = rocksdb::kNoCompression;  // float values do not compress
  options.IncreaseParallelism(2);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(options, dir, &raw);
  if (!opened.ok()) {
    return Status::FailedPrecondition(
        fmt::format("data dir {} cannot be opened (damaged?): {}", dir, opened.ToString()));
  }
  std::unique_ptr<DurableStore> store(new DurableStore(dir, durability));
  store->db_.reset(raw);
  if (Status s = store->OpenValueLog(); !s.ok()) return s;
  std::string meta;
  rocksdb::Status got = raw->Get(rocksdb::ReadOptions(), kMetaKey, &meta);
  if (got.IsNotFound()) {
    // A data dir created by a server that stopped before it joined a cluster holds nothing.
    std::unique_ptr<rocksdb::Iterator> any(raw->NewIterator(rocksdb::ReadOptions()));
    any->SeekToFirst();
    if (!fresh && any->Valid()) {
      return Status::FailedPrecondition(fmt::format(
          "data dir {} has no hetps meta record (damaged, or not a hetps data dir)", dir));
    }
    return store;
  }
  if (!got.ok()) return FromRocks(got, fmt::format("data dir {}: reading its meta record", dir));
  proto::DurableMeta parsed;
  if (!parsed.ParseFromString(meta)) {
    return Status::Malformed(fmt::format("data dir {}: its meta record is damaged", dir));
  }
  if (parsed.format() != kFormat) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} has layout {}; this server reads layout {}", dir, parsed.format(), kFormat));
  }
  store->meta_ = std::move(parsed);
  return store;
}

// With per-update logging, or when an earlier run left values in one.
Status DurableStore::OpenValueLog() {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir_) / kValueLogDir).string();
  std::error_code ec;
  if (durability_ == Durability::kNone && !fs::exists(path, ec)) return Status();
  ValueLog::Options options;
  options.dead = [this](int32_t pid, uint64_t lsn) {
    return pid < 0 || static_cast<size_t>(pid) >= num_partitions_ ||
           checkpoint_lsn_[pid].load() >= lsn;
  };
  // The checkpoints that made a segment's values dead are in RocksDB's log: on disk before
  // the values are written over, so a power loss never leaves a record without its values.
  options.before_reuse = [this] {
    return FromRocks(db_->SyncWAL(), fmt::format("data dir {}: syncing its log", dir_));
  };
  auto log = ValueLog::Open(path, std::move(options));
  if (!log.ok()) return log.status();
  values_ = std::move(*log);
  return Status();
}

Status DurableStore::SetMeta(const proto::DurableMeta& meta) {
  proto::DurableMeta m = meta;
  m.set_format(kFormat);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (Status s = FromRocks(db_->Put(sync, kMetaKey, m.SerializeAsString()),
                           fmt::format("data dir {}: writing its meta record", dir_));
      !s.ok()) {
    return s;
  }
  meta_ = std::move(m);
  return Status();
}

void DurableStore::Prepare(size_t num_partitions) {
  last_lsn_.assign(num_partitions, 0);
  checkpoint_lsn_ = std::make_unique<std::atomic<uint64_t>[]>(num_partitions);
  for (size_t i = 0; i < num_partitions; ++i) checkpoint_lsn_[i] = 0;
  num_partitions_ = num_partitions;
  log_bytes_.assign(num_partitions, 0);
}

Status DurableStore::Append(int32_t pid, const proto::LogRecord& record, const float* values,
                            int64_t n) {
  const uint64_t lsn = ++last_lsn_[pid];
  if (durability_ == Durability::kNone) return Status();  // only marks the partition dirty
  log_bytes_[pid] += n * static_cast<int64_t>(sizeof(float));
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  const proto::LogRecord* logged = &record;
  proto::LogRecord with_ref;
  if (values_ && bytes >= kValueLogMinBytes) {
    auto ref = values_->Append(pid, lsn, values, bytes);
    if (!ref.ok()) return ref.status();
    if (*ref) {  // else the ring is full: the values go into RocksDB as below
      if (durability_ == Durability::kMachine) {
        if (Status s = values_->Sync(**ref); !s.ok()) return s;
      }
      with_ref = record;
      *with_ref.mutable_value_ref() = std::move(**ref);
      logged = &with_ref;
      n = 0;
      FaultPoint("update.value_logged");
    }
  }
  // [header length, 4 bytes little-endian][header][values], gathered without a copy of the
  // values (RocksDB copies them once, into its log and memtable).
  const std::string header = logged->SerializeAsString();
  const uint32_t length = static_cast<uint32_t>(header.size());
  char prefix[4];
  for (int i = 0; i < 4; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const std::string key = LogKey(pid, lsn);
  const rocksdb::Slice key_slice(key);
  const rocksdb::Slice parts[] = {rocksdb::Slice(prefix, 4), rocksdb::Slice(header),
                                  rocksdb::Slice(reinterpret_cast<const char*>(values),
                                                 static_cast<size_t>(n) * sizeof(float))};
  rocksdb::WriteBatch batch;
  rocksdb::Status put =
      batch.Put(rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(parts, 3));
  if (!put.ok()) return FromRocks(put, fmt::format("data dir {}: partition {}", dir_, pid));
  rocksdb::WriteOptions options;
  options.sync = durability_ == Durability::kMachine;
  return FromRocks(db_->Write(options, &batch),
                   fmt::format("data dir {}: logging an update of partition {}", dir_, pid));
}

Status DurableStore::Checkpoint(int32_t pid, const PartitionState& part) {
  proto::PartitionCheckpoint checkpoint;
  part.Save(checkpoint);
  const uint64_t lsn = last_lsn_[pid];
  checkpoint.set_lsn(lsn);
  FaultPoint("checkpoint.saved");
  const int64_t size = static_cast<int64_t>(checkpoint.ByteSizeLong());
  std::string bytes;
  if (values_ && size >= kValueLogMinBytes) {
    auto ref = values_->AppendWith(pid, lsn + 1, size, [&](char* to) {
      checkpoint.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(to));
    });
    if (!ref.ok()) return ref.status();
    if (*ref) {  // else the ring is full: the checkpoint goes into RocksDB whole
      if (durability_ == Durability::kMachine) {
        if (Status s = values_->Sync(**ref); !s.ok()) return s;
      }
      proto::PartitionCheckpoint stub;
      stub.set_lsn(lsn);
      *stub.mutable_stored() = std::move(**ref);
      bytes = stub.SerializeAsString();
    }
  }
  if (bytes.empty()) bytes = checkpoint.SerializeAsString();
  rocksdb::WriteBatch batch;
  batch.Put(CheckpointKey(pid), bytes);
  batch.DeleteRange(LogKey(pid, 0), LogKey(pid, lsn + 1));
  rocksdb::WriteOptions options;
  options.sync = durability_ == Durability::kMachine;
  if (Status s = FromRocks(db_->Write(options, &batch),
                           fmt::format("data dir {}: checkpoint of partition {}", dir_, pid));
      !s.ok()) {
    return s;
  }
  FaultPoint("checkpoint.written");
  checkpoint_lsn_[pid].store(lsn);
  log_bytes_[pid] = 0;
  return Status();
}

StatusOr<int64_t> DurableStore::Recover(int32_t pid, PartitionState& part, const Replay& replay) {
  const std::string where = fmt::format("data dir {}, partition {}", dir_, pid);
  std::string bytes;
  rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), CheckpointKey(pid), &bytes);
  uint64_t lsn = 0;
  if (got.ok()) {
    proto::PartitionCheckpoint checkpoint;
    if (!checkpoint.ParseFromString(bytes)) {
      return Status::Malformed(where + ": the checkpoint is damaged");
    }
    if (checkpoint.has_stored()) {  // in the value log
      const proto::ValueRef ref = checkpoint.stored();
      const uint64_t at = checkpoint.lsn() + 1;
      auto read = values_ ? values_->Read(ref, pid, at)
                          : StatusOr<const char*>(Status::Malformed(
                                "its checkpoint is in a value log the data dir lacks"));
      if (!read.ok()) return Status(read.status().code(), where + ": " + read.status().message());
      if (!checkpoint.ParseFromArray(*read, static_cast<int>(ref.length()))) {
        return Status::Malformed(where + ": the checkpoint in the value log is damaged");
      }
      values_->Hold(ref, pid, at);
    }
    if (Status s = part.Load(checkpoint); !s.ok()) {
      return Status(s.code(), fmt::format("{}: {}", where, s.message()));
    }
    lsn = checkpoint.lsn();
  } else if (!got.IsNotFound()) {
    return FromRocks(got, where + ": reading the checkpoint");
  }
  checkpoint_lsn_[pid].store(lsn);
  last_lsn_[pid] = lsn;
  int64_t replayed = 0;
  rocksdb::ReadOptions read;
  const std::string end = LogKey(pid + 1, 0);
  rocksdb::Slice upper(end);
  read.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(LogKey(pid, lsn + 1)); it->Valid(); it->Next()) {
    const rocksdb::Slice v = it->value();
    uint32_t length = 0;
    for (int i = 0; i < 4 && i < static_cast<int>(v.size()); ++i) {
      length |= static_cast<uint32_t>(static_cast<uint8_t>(v[i])) << (8 * i);
    }
    proto::LogRecord record;
    const size_t rest = v.size() < 4 + static_cast<size_t>(length) ? 0 : v.size() - 4 - length;
    if (v.size() < 4 + static_cast<size_t>(length) || rest % sizeof(float) != 0 ||
        !record.ParseFromArray(v.data() + 4, static_cast<int>(length))) {
      return Status::Malformed(
          fmt::format("{}: log record {} is damaged", where, LsnOf(it->key())));
    }
    const uint64_t at = LsnOf(it->key());
    // RocksDB's values are not aligned for floats in general: copy them out. The value log's
    // are (and are read in place).
    std::vector<float> copied(rest / sizeof(float));
    if (rest > 0) std::memcpy(copied.data(), v.data() + 4 + length, rest);
    const float* values = copied.data();
    int64_t n = static_cast<int64_t>(copied.size());
    if (record.has_value_ref()) {
      auto read = values_ ? values_->Read(record.value_ref(), pid, at)
                          : StatusOr<const char*>(Status::Malformed(fmt::format(
                                "log record {} refers to a value log the data dir lacks", at)));
      if (!read.ok() && durability_ != Durability::kMachine) {
        // Below machine durability a machine crash may lose acknowledged values: the log ends
        // before the first one lost, and what followed it is dropped.
        spdlog::warn("{}: {}; the partition's log ends before it", where, read.status().message());
        if (Status s = FromRocks(db_->DeleteRange(rocksdb::WriteOptions(),
                                                  db_->DefaultColumnFamily(), LogKey(pid, at), end),
                                 where + ": dropping the log after a lost value");
            !s.ok()) {
          return s;
        }
        break;
      }
      if (!read.ok()) return Status(read.status().code(), where + ": " + read.status().message());
      values = reinterpret_cast<const float*>(*read);
      n = static_cast<int64_t>(record.value_ref().length() / sizeof(float));
      values_->Hold(record.value_ref(), pid, at);
    }
    if (Status s = replay(record, values, n); !s.ok()) {
      return Status(s.code(),
                    fmt::format("{}: replaying log record {}: {}", where, at, s.message()));
    }
    last_lsn_[pid] = at;
    ++replayed;
  }
  if (!it->status().ok()) return FromRocks(it->status(), where + ": reading the log");
  return replayed;
}

}  // namespace hetps
