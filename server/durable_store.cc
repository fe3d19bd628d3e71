#include "server/durable_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>  // XXH3 with the widest vector unit this CPU has

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

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

// A checkpoint file: this header, the checkpoint without values and slots (meta_bytes), then
// the arrays raw (array_bytes); `hash` is XXH3 over everything after the header.
constexpr char kCheckpointDir[] = "checkpoints";
constexpr char kSpillDir[] = "spill";
constexpr uint32_t kFileMagic = 0x66634548;  // "HEcf"
struct FileHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t meta_bytes;
  uint64_t array_bytes;
  uint64_t hash;
};
constexpr size_t kFileChunk = 1 << 20;

using HashState = std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>;
HashState NewHash() {
  HashState state(XXH3_createState(), &XXH3_freeState);
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state.get());
  return state;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

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
  HashState hash = NewHash();
  const char* from = static_cast<const char*>(data);
  bool ok = true;
  for (size_t at = 0, total = static_cast<size_t>(bytes); ok && at < total; at += kFileChunk) {
    const size_t n = std::min(kFileChunk, total - at);
    XXH3_64bits_update_dispatch(hash.get(), from + at, n);
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
  ref.set_hash(XXH3_64bits_digest(hash.get()));
  return ref;
}

Status DurableStore::ReadSpilled(int32_t pid, const proto::ValueRef& ref,
                                 std::vector<float>& out) const {
  const std::string path = (std::filesystem::path(dir_) / kSpillDir / std::to_string(pid)).string();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Malformed(fmt::format("{}: {}", path, strerror(errno)));
  out.resize(ref.length() / sizeof(float));
  char* to = reinterpret_cast<char*>(out.data());
  HashState hash = NewHash();
  bool ok = ref.length() % sizeof(float) == 0;
  for (size_t at = 0; ok && at < ref.length(); at += kFileChunk) {
    const size_t n = std::min<size_t>(kFileChunk, ref.length() - at);
    ok = pread(fd, to + at, n, static_cast<off_t>(ref.offset() + at)) == static_cast<ssize_t>(n);
    if (ok) XXH3_64bits_update_dispatch(hash.get(), to + at, n);
  }
  close(fd);
  if (!ok || XXH3_64bits_digest(hash.get()) != ref.hash()) {
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
  const std::string path = folder + "/" + name;
  proto::PartitionCheckpoint meta;
  part.SaveMeta(meta);
  meta.set_lsn(lsn);
  const std::string meta_bytes = meta.SerializeAsString();
  const std::vector<const float*> arrays = part.Arrays();
  const size_t array_bytes = static_cast<size_t>(part.info().length) * sizeof(float);
  FileHeader header{kFileMagic, 0, meta_bytes.size(), array_bytes * arrays.size(), 0};
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto failed = [&](const char* what) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    unlink(path.c_str());
    return Status::Internal(
        fmt::format("data dir {}: {} checkpoint file {}: {}", dir_, what, name, why));
  };
  if (fd < 0) return failed("creating");
  HashState hash = NewHash();
  XXH3_64bits_update_dispatch(hash.get(), meta_bytes.data(), meta_bytes.size());
  if (!WriteAll(fd, reinterpret_cast<const char*>(&header), sizeof(header)) ||
      !WriteAll(fd, meta_bytes.data(), meta_bytes.size())) {
    return failed("writing");
  }
  for (const float* array : arrays) {
    const char* bytes = reinterpret_cast<const char*>(array);
    for (size_t at = 0; at < array_bytes; at += kFileChunk) {
      const size_t n = std::min(kFileChunk, array_bytes - at);
      XXH3_64bits_update_dispatch(hash.get(), bytes + at, n);
      if (!WriteAll(fd, bytes + at, n)) return failed("writing");
    }
  }
  header.hash = XXH3_64bits_digest(hash.get());
  if (pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return failed("writing");
  }
  if (durability_ == Durability::kMachine && fdatasync(fd) != 0) return failed("syncing");
  if (close(fd) != 0) {
    const std::string why = strerror(errno);
    unlink(path.c_str());
    return Status::Internal(
        fmt::format("data dir {}: writing checkpoint file {}: {}", dir_, name, why));
  }
  if (durability_ == Durability::kMachine) {  // the file's name too, before its record
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
  const std::string what = fmt::format("data dir {}: checkpoint file {}", dir_, path);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Malformed(fmt::format("{}: {}", what, strerror(errno)));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    close(*f);
    delete f;
  });
  std::vector<float*> arrays = part.MutableArrays();
  const size_t array_bytes = static_cast<size_t>(part.info().length) * sizeof(float);
  struct stat st;
  FileHeader header;
  if (fstat(fd, &st) != 0 || !ReadAll(fd, reinterpret_cast<char*>(&header), sizeof(header)) ||
      header.magic != kFileMagic) {
    return Status::Malformed(what + " is damaged (no checkpoint header)");
  }
  if (header.array_bytes != array_bytes * arrays.size() || header.meta_bytes > (1u << 30) ||
      static_cast<uint64_t>(st.st_size) !=
          sizeof(header) + header.meta_bytes + header.array_bytes) {
    return Status::Malformed(fmt::format(
        "{} is damaged: {} bytes holding {} bytes of arrays, where this partition keeps {}", what,
        st.st_size, header.array_bytes, array_bytes * arrays.size()));
  }
  HashState hash = NewHash();
  std::string meta_bytes(header.meta_bytes, '\0');
  if (!ReadAll(fd, meta_bytes.data(), meta_bytes.size())) {
    return Status::Malformed(what + " is damaged (short)");
  }
  XXH3_64bits_update_dispatch(hash.get(), meta_bytes.data(), meta_bytes.size());
  for (float* array : arrays) {
    char* bytes = reinterpret_cast<char*>(array);
    for (size_t at = 0; at < array_bytes; at += kFileChunk) {
      const size_t n = std::min(kFileChunk, array_bytes - at);
      if (!ReadAll(fd, bytes + at, n)) return Status::Malformed(what + " is damaged (short)");
      XXH3_64bits_update_dispatch(hash.get(), bytes + at, n);
    }
  }
  if (XXH3_64bits_digest(hash.get()) != header.hash || !meta.ParseFromString(meta_bytes)) {
    return Status::Malformed(what + " is damaged (its hash does not match)");
  }
  return Status();
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
  // The checkpoint as its state without the arrays, then each array as its field (tag, length,
  // raw floats): protobuf reads fields in any order, so this is the message Save would build,
  // copied once into the value log instead of into a message and then out of it.
  proto::PartitionCheckpoint checkpoint;
  part.SaveMeta(checkpoint);
  const uint64_t lsn = last_lsn_[pid];
  checkpoint.set_lsn(lsn);
  FaultPoint("checkpoint.saved");
  const std::vector<const float*> arrays = part.Arrays();
  const size_t array_bytes = static_cast<size_t>(part.info().length) * sizeof(float);
  const std::string meta = checkpoint.SerializeAsString();
  std::vector<std::string> fields;  // per array: its tag and length
  std::vector<std::string_view> parts = {meta};
  int64_t size = static_cast<int64_t>(meta.size());
  fields.reserve(arrays.size());
  for (size_t k = 0; k < arrays.size(); ++k) {
    std::string& field = fields.emplace_back(1, k == 0 ? '\x22' : '\x2a');  // values 4, slots 5
    for (uint64_t v = array_bytes; true; v >>= 7) {
      field.push_back(static_cast<char>(v >= 0x80 ? (v & 0x7f) | 0x80 : v));
      if (v < 0x80) break;
    }
    size += static_cast<int64_t>(field.size() + array_bytes);
  }
  for (size_t k = 0; k < arrays.size(); ++k) {
    parts.push_back(fields[k]);
    parts.emplace_back(reinterpret_cast<const char*>(arrays[k]), array_bytes);
  }
  std::string bytes, file;
  if (values_ && size >= kValueLogMinBytes) {
    auto ref = values_->Append(pid, lsn + 1, parts);
    if (!ref.ok()) return ref.status();
    if (*ref) {  // else the ring is full: the checkpoint goes into a file of its own
      if (durability_ == Durability::kMachine) {
        if (Status s = values_->Sync(**ref); !s.ok()) return s;
      }
      proto::PartitionCheckpoint stub;
      stub.set_lsn(lsn);
      *stub.mutable_stored() = std::move(**ref);
      bytes = stub.SerializeAsString();
    }
  }
  if (bytes.empty() && size >= kValueLogMinBytes) {
    auto written = WriteCheckpointFile(pid, lsn, part);
    if (!written.ok()) return written.status();
    file = *written;
    proto::PartitionCheckpoint stub;
    stub.set_lsn(lsn);
    stub.set_file(file);
    bytes = stub.SerializeAsString();
  }
  if (bytes.empty()) {
    proto::PartitionCheckpoint full;
    part.Save(full);
    full.set_lsn(lsn);
    bytes = full.SerializeAsString();
  }
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
  spill_offset_[pid] = 0;            // its spilled values are dead: written over from the start
  RemoveCheckpointFiles(pid, file);  // the one it replaced
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
    const std::string file = checkpoint.file();
    Status loaded;
    if (!file.empty()) {
      proto::PartitionCheckpoint meta;
      loaded = ReadCheckpointFile(file, part, meta);
      if (loaded.ok()) loaded = part.LoadMeta(meta);
    } else {
      loaded = part.Load(checkpoint);
    }
    if (!loaded.ok()) {
      return Status(loaded.code(), fmt::format("{}: {}", where, loaded.message()));
    }
    RemoveCheckpointFiles(pid, file);  // any a crash left behind
    lsn = checkpoint.lsn();
  } else if (!got.IsNotFound()) {
    return FromRocks(got, where + ": reading the checkpoint");
  } else {
    RemoveCheckpointFiles(pid, "");
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
      const proto::ValueRef& ref = record.value_ref();
      StatusOr<const char*> read = Status::Malformed(
          fmt::format("log record {} refers to a value log the data dir lacks", at));
      if (ref.spilled()) {
        Status s = ReadSpilled(pid, ref, copied);
        read = s.ok() ? StatusOr<const char*>(reinterpret_cast<const char*>(copied.data()))
                      : StatusOr<const char*>(s);
        if (s.ok()) {
          spill_offset_[pid] = std::max<int64_t>(spill_offset_[pid],
                                                 static_cast<int64_t>(ref.offset() + ref.length()));
        }
      } else if (values_) {
        read = values_->Read(ref, pid, at);
      }
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
      n = static_cast<int64_t>(ref.length() / sizeof(float));
      if (!ref.spilled()) values_->Hold(ref, pid, at);
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
