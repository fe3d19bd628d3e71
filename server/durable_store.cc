#include "server/durable_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "common/data_dir.h"
#include "server/checkpoint_file.h"
#include "server/fault_point.h"
#include "server/file_io.h"
#include "server/log_record.h"
#include "server/partition_store.h"
#include "server/rocks_status.h"
#include "server/value_log.h"

namespace hetps {
namespace {

constexpr int kFormat = 1;
constexpr char kMetaKey[] = "m";
constexpr char kValueLogDir[] = "values";
// Values at least this large go to the value log: below it RocksDB's per-byte costs matter
// less than a record of their own.
constexpr int64_t kValueLogMinBytes = 64 << 10;

constexpr char kCheckpointDir[] = "checkpoints";
constexpr char kSpillDir[] = "spill";
constexpr size_t kFileChunk = 1 << 20;

// The pid of checkpoint file "<pid>-<at>", or -1.
int32_t FilePid(const std::string& name) {
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0) return -1;
  try {
    return std::stoi(name.substr(0, dash));
  } catch (const std::exception&) {
    return -1;
  }
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
                                                           Durability durability,
                                                           int64_t ring_segment_bytes) {
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
  if (Status s = store->OpenValueLog(ring_segment_bytes); !s.ok()) return s;
  std::error_code ec;
  for (const char* folder : {kCheckpointDir, kSpillDir}) {
    fs::create_directories(fs::path(dir) / folder, ec);
    if (ec) {
      return Status::Internal(
          fmt::format("data dir {}: cannot create {}: {}", dir, folder, ec.message()));
    }
  }
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / kCheckpointDir, ec)) {
    const std::string name = entry.path().filename().string();
    store->files_at_open_[FilePid(name)].push_back(name);
  }
  if (Status s = store->ReadMeta(fresh); !s.ok()) return s;
  return store;
}

Status DurableStore::ReadMeta(bool fresh) {
  std::string meta;
  rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), kMetaKey, &meta);
  if (got.IsNotFound()) {
    // A data dir created by a server that stopped before it joined a cluster holds nothing.
    std::unique_ptr<rocksdb::Iterator> any(db_->NewIterator(rocksdb::ReadOptions()));
    any->SeekToFirst();
    if (!fresh && any->Valid()) {
      return Status::FailedPrecondition(fmt::format(
          "data dir {} has no hetps meta record (damaged, or not a hetps data dir)", dir_));
    }
    return Status();
  }
  if (!got.ok()) return FromRocks(got, fmt::format("data dir {}: reading its meta record", dir_));
  proto::DurableMeta parsed;
  if (!parsed.ParseFromString(meta)) {
    return Status::Malformed(fmt::format("data dir {}: its meta record is damaged", dir_));
  }
  if (parsed.format() != kFormat) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} has layout {}; this server reads layout {}", dir_, parsed.format(), kFormat));
  }
  meta_ = std::move(parsed);
  return Status();
}

// With per-update logging, or when an earlier run left values in one.
Status DurableStore::OpenValueLog(int64_t segment_bytes) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir_) / kValueLogDir).string();
  std::error_code ec;
  if (durability_ == Durability::kNone && !fs::exists(path, ec)) return Status();
  ValueLog::Options options;
  options.segment_bytes = segment_bytes;
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
  checkpoint_files_.assign(num_partitions, "");
  spill_offset_.assign(num_partitions, 0);
}

StatusOr<proto::ValueRef> DurableStore::Spill(int32_t pid, const void* data, int64_t bytes) {
  const std::string path = (std::filesystem::path(dir_) / kSpillDir / std::to_string(pid)).string();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::Internal(
        fmt::format("data dir {}: opening {}: {}", dir_, path, strerror(errno)));
  }
  const int64_t offset = spill_offset_[pid];
  StreamHash hash;
  const char* from = static_cast<const char*>(data);
  bool ok = true;
  for (size_t at = 0, total = static_cast<size_t>(bytes); ok && at < total; at += kFileChunk) {
    const size_t n = std::min(kFileChunk, total - at);
    hash.Update(from + at, n);
    for (size_t done = 0; ok && done < n;) {
      const ssize_t w = pwrite(fd, from + at + done, n - done, offset + at + done);
      if (w < 0 && errno == EINTR) continue;
      ok = w > 0;
      if (ok) done += static_cast<size_t>(w);
    }
  }
  if (ok && durability_ == Durability::kMachine) ok = fdatasync(fd) == 0;
  const std::string why = ok ? "" : strerror(errno);
  close(fd);
  if (!ok) return Status::Internal(fmt::format("data dir {}: writing {}: {}", dir_, path, why));
  spill_offset_[pid] = offset + bytes;
  proto::ValueRef ref;
  ref.set_spilled(true);
  ref.set_offset(offset);
  ref.set_length(bytes);
  ref.set_hash(hash.Digest());
  return ref;
}

Status DurableStore::ReadSpilled(int32_t pid, const proto::ValueRef& ref,
                                 std::vector<float>& out) const {
  const std::string path = (std::filesystem::path(dir_) / kSpillDir / std::to_string(pid)).string();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Malformed(fmt::format("{}: {}", path, strerror(errno)));
  out.resize(ref.length() / sizeof(float));
  char* to = reinterpret_cast<char*>(out.data());
  StreamHash hash;
  bool ok = ref.length() % sizeof(float) == 0;
  for (size_t at = 0; ok && at < ref.length(); at += kFileChunk) {
    const size_t n = std::min<size_t>(kFileChunk, ref.length() - at);
    ok = pread(fd, to + at, n, static_cast<off_t>(ref.offset() + at)) == static_cast<ssize_t>(n);
    if (ok) hash.Update(to + at, n);
  }
  close(fd);
  if (!ok || hash.Digest() != ref.hash()) {
    return Status::Malformed(fmt::format(
        "{}: the value of {} bytes at {} does not match its hash (it never reached the disk, or "
        "was damaged)",
        path, ref.length(), ref.offset()));
  }
  return Status();
}

StatusOr<std::string> DurableStore::WriteCheckpointFile(int32_t pid, uint64_t lsn,
                                                        const PartitionState& part) {
  const std::string name = fmt::format("{}-{}", pid, lsn + 1);
  // Nothing was logged since that file was written: it holds this very state (and writing it
  // again in place could leave its record pointing at half a file).
  if (name == checkpoint_files_[pid]) return name;
  const std::string folder = (std::filesystem::path(dir_) / kCheckpointDir).string();
  proto::PartitionCheckpoint meta;
  part.SaveMeta(meta);
  meta.set_lsn(lsn);
  const bool sync = durability_ == Durability::kMachine;
  if (Status s =
          hetps::WriteCheckpointFile(folder + "/" + name, meta, part.Arrays(),
                                     static_cast<size_t>(part.info().length) * sizeof(float), sync);
      !s.ok()) {
    return Status(s.code(), fmt::format("data dir {}: {}", dir_, s.message()));
  }
  if (sync) {  // the file's name too, before its record
    const int dir_fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      fsync(dir_fd);
      close(dir_fd);
    }
  }
  return name;
}

Status DurableStore::ReadCheckpointFile(const std::string& name, PartitionState& part,
                                        proto::PartitionCheckpoint& meta) const {
  const std::string path = (std::filesystem::path(dir_) / kCheckpointDir / name).string();
  Status s = hetps::ReadCheckpointFile(path, meta, part.MutableArrays(),
                                       static_cast<size_t>(part.info().length) * sizeof(float));
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("data dir {}: {}", dir_, s.message()));
}

void DurableStore::RemoveCheckpointFiles(int32_t pid, const std::string& keep) {
  const std::filesystem::path folder = std::filesystem::path(dir_) / kCheckpointDir;
  std::error_code ec;
  if (!checkpoint_files_[pid].empty() && checkpoint_files_[pid] != keep) {
    std::filesystem::remove(folder / checkpoint_files_[pid], ec);
  }
  std::vector<std::string> found;
  {
    std::lock_guard<std::mutex> lock(files_mu_);  // owners recover side by side
    auto it = files_at_open_.find(pid);
    if (it != files_at_open_.end()) {
      found = std::move(it->second);
      files_at_open_.erase(it);
    }
  }
  for (const std::string& name : found) {
    if (name != keep) std::filesystem::remove(folder / name, ec);
  }
  checkpoint_files_[pid] = keep;
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
    if (*ref) {
      if (durability_ == Durability::kMachine) {
        if (Status s = values_->Sync(**ref); !s.ok()) return s;
      }
    } else {  // the ring is full: the partition's spill file
      auto spilled = Spill(pid, values, bytes);
      if (!spilled.ok()) return spilled.status();
      *ref = std::move(*spilled);
    }
    with_ref = record;
    *with_ref.mutable_value_ref() = std::move(**ref);
    logged = &with_ref;
    n = 0;
    FaultPoint("update.value_logged");
  }
  // The record's prefix and the values, gathered without a copy of the values (RocksDB copies
  // them once, into its log and memtable).
  const std::string prefix = EncodeLogPrefix(*logged);
  const std::string key = LogKey(pid, lsn);
  const rocksdb::Slice key_slice(key);
  const rocksdb::Slice parts[] = {rocksdb::Slice(prefix),
                                  rocksdb::Slice(reinterpret_cast<const char*>(values),
                                                 static_cast<size_t>(n) * sizeof(float))};
  rocksdb::WriteBatch batch;
  rocksdb::Status put =
      batch.Put(rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(parts, 2));
  if (!put.ok()) return FromRocks(put, fmt::format("data dir {}: partition {}", dir_, pid));
  rocksdb::WriteOptions options;
  options.sync = durability_ == Durability::kMachine;
  return FromRocks(db_->Write(options, &batch),
                   fmt::format("data dir {}: logging an update of partition {}", dir_, pid));
}

namespace {

// A checkpoint as one value-log entry: its state without the arrays (`meta`), then each array
// as its field (tag, length, raw floats). Protobuf reads fields in any order, so these bytes
// are the message PartitionState::Save would build, copied once into the value log instead of
// into a message and then out of it.
struct CheckpointParts {
  std::vector<std::string> fields;  // per array: its tag and length
  std::vector<std::string_view> parts;
  int64_t size = 0;
};

void ArraysAsFields(const std::string& meta, const std::vector<const float*>& arrays,
                    size_t array_bytes, CheckpointParts& out) {
  out.parts = {meta};
  out.size = static_cast<int64_t>(meta.size());
  out.fields.reserve(arrays.size());
  for (size_t k = 0; k < arrays.size(); ++k) {
    std::string& field = out.fields.emplace_back(1, k == 0 ? '\x22' : '\x2a');  // values 4, slots 5
    for (uint64_t v = array_bytes; true; v >>= 7) {
      field.push_back(static_cast<char>(v >= 0x80 ? (v & 0x7f) | 0x80 : v));
      if (v < 0x80) break;
    }
    out.size += static_cast<int64_t>(field.size() + array_bytes);
  }
  for (size_t k = 0; k < arrays.size(); ++k) {
    out.parts.push_back(out.fields[k]);
    out.parts.emplace_back(reinterpret_cast<const char*>(arrays[k]), array_bytes);
  }
}

}  // namespace

Status DurableStore::Checkpoint(int32_t pid, const PartitionState& part) {
  const uint64_t lsn = last_lsn_[pid];
  std::string file;
  auto bytes = CheckpointRecord(pid, lsn, part, file);
  if (!bytes.ok()) return bytes.status();
  rocksdb::WriteBatch batch;
  batch.Put(CheckpointKey(pid), *bytes);
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
  spill_offset_[pid] = 0;            // its spilled values are dead: written over from the start
  RemoveCheckpointFiles(pid, file);  // the one it replaced
  return Status();
}

StatusOr<std::string> DurableStore::CheckpointRecord(int32_t pid, uint64_t lsn,
                                                     const PartitionState& part,
                                                     std::string& file) {
  proto::PartitionCheckpoint checkpoint;
  part.SaveMeta(checkpoint);
  checkpoint.set_lsn(lsn);
  FaultPoint("checkpoint.saved");
  const std::string meta = checkpoint.SerializeAsString();
  CheckpointParts parts;
  ArraysAsFields(meta, part.Arrays(), static_cast<size_t>(part.info().length) * sizeof(float),
                 parts);
  proto::PartitionCheckpoint stub;  // where a large one is
  stub.set_lsn(lsn);
  if (parts.size < kValueLogMinBytes) {
    proto::PartitionCheckpoint full;
    part.Save(full);
    full.set_lsn(lsn);
    return full.SerializeAsString();
  }
  if (values_) {
    auto ref = values_->Append(pid, lsn + 1, parts.parts);
    if (!ref.ok()) return ref.status();
    if (*ref) {  // else the ring is full: the checkpoint goes into a file of its own
      if (durability_ == Durability::kMachine) {
        if (Status s = values_->Sync(**ref); !s.ok()) return s;
      }
      *stub.mutable_stored() = std::move(**ref);
      return stub.SerializeAsString();
    }
  }
  auto written = WriteCheckpointFile(pid, lsn, part);
  if (!written.ok()) return written.status();
  file = *written;
  stub.set_file(file);
  return stub.SerializeAsString();
}

StatusOr<int64_t> DurableStore::Recover(int32_t pid, PartitionState& part, const Replay& replay) {
  auto lsn = LoadCheckpoint(pid, part);
  if (!lsn.ok()) return lsn.status();
  checkpoint_lsn_[pid].store(*lsn);
  last_lsn_[pid] = *lsn;
  return ReplayLog(pid, *lsn, replay);
}

StatusOr<uint64_t> DurableStore::LoadCheckpoint(int32_t pid, PartitionState& part) {
  const std::string where = fmt::format("data dir {}, partition {}", dir_, pid);
  std::string bytes;
  rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), CheckpointKey(pid), &bytes);
  if (got.IsNotFound()) {
    RemoveCheckpointFiles(pid, "");
    return uint64_t{0};
  }
  if (!got.ok()) return FromRocks(got, where + ": reading the checkpoint");
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
  const std::string file = checkpoint.file();
  Status loaded;
  if (!file.empty()) {
    proto::PartitionCheckpoint meta;
    loaded = ReadCheckpointFile(file, part, meta);
    if (loaded.ok()) loaded = part.LoadMeta(meta);
  } else {
    loaded = part.Load(checkpoint);
  }
  if (!loaded.ok()) return Status(loaded.code(), fmt::format("{}: {}", where, loaded.message()));
  RemoveCheckpointFiles(pid, file);  // any a crash left behind
  return checkpoint.lsn();
}

StatusOr<int64_t> DurableStore::ReplayLog(int32_t pid, uint64_t after, const Replay& replay) {
  const std::string where = fmt::format("data dir {}, partition {}", dir_, pid);
  int64_t replayed = 0;
  rocksdb::ReadOptions read;
  const std::string end = LogKey(pid + 1, 0);
  rocksdb::Slice upper(end);
  read.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(LogKey(pid, after + 1)); it->Valid(); it->Next()) {
    const std::optional<uint64_t> lsn = LsnOf(it->key().ToStringView());
    proto::LogRecord record;
    std::string_view raw;
    Status decoded = lsn ? DecodeLogRecord(it->value().ToStringView(), record, raw)
                         : Status::Malformed("a key that is not a log record's");
    if (!decoded.ok()) {
      return Status::Malformed(fmt::format("{}: log record {} is damaged: {}", where,
                                           lsn.value_or(0), decoded.message()));
    }
    const uint64_t at = *lsn;
    // RocksDB's values are not aligned for floats in general: copy them out. The value log's
    // are (and are read in place).
    std::vector<float> copied(raw.size() / sizeof(float));
    if (!raw.empty()) std::memcpy(copied.data(), raw.data(), raw.size());
    const float* values = copied.data();
    int64_t n = static_cast<int64_t>(copied.size());
    if (record.has_value_ref()) {
      auto value = ReadLoggedValue(pid, at, record.value_ref(), copied);
      if (!value.ok()) return value.status();
      if (*value == nullptr) {  // lost in a machine crash below machine durability
        if (Status s = FromRocks(db_->DeleteRange(rocksdb::WriteOptions(),
                                                  db_->DefaultColumnFamily(), LogKey(pid, at), end),
                                 where + ": dropping the log after a lost value");
            !s.ok()) {
          return s;
        }
        break;
      }
      values = *value;
      n = static_cast<int64_t>(record.value_ref().length() / sizeof(float));
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

StatusOr<const float*> DurableStore::ReadLoggedValue(int32_t pid, uint64_t at,
                                                     const proto::ValueRef& ref,
                                                     std::vector<float>& copied) {
  const std::string where = fmt::format("data dir {}, partition {}", dir_, pid);
  StatusOr<const char*> read =
      Status::Malformed(fmt::format("log record {} refers to a value log the data dir lacks", at));
  if (ref.spilled()) {
    Status s = ReadSpilled(pid, ref, copied);
    read = s.ok() ? StatusOr<const char*>(reinterpret_cast<const char*>(copied.data()))
                  : StatusOr<const char*>(s);
    if (s.ok()) {
      spill_offset_[pid] =
          std::max<int64_t>(spill_offset_[pid], static_cast<int64_t>(ref.offset() + ref.length()));
    }
  } else if (values_) {
    read = values_->Read(ref, pid, at);
  }
  if (!read.ok() && durability_ != Durability::kMachine) {
    // Below machine durability a machine crash may lose acknowledged values: the log ends
    // before the first one lost, and what followed it is dropped.
    spdlog::warn("{}: {}; the partition's log ends before it", where, read.status().message());
    return static_cast<const float*>(nullptr);
  }
  if (!read.ok()) return Status(read.status().code(), where + ": " + read.status().message());
  if (!ref.spilled()) values_->Hold(ref, pid, at);
  return reinterpret_cast<const float*>(*read);
}

}  // namespace hetps
