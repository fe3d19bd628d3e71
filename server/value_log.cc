#include "server/value_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>  // XXH3 with the widest vector unit this CPU has (xxhash.h too)

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>

#include "server/file_io.h"

namespace hetps {
namespace {

constexpr uint32_t kMagic = 0x6c764548;  // "HEvl"
constexpr int64_t kAlign = 64;           // entries and their payloads start on 64-byte bounds

struct EntryHeader {
  uint32_t magic;
  int32_t pid;
  uint64_t lsn;
  uint64_t length;
  uint64_t hash;
};
static_assert(sizeof(EntryHeader) <= kAlign);

int64_t Aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

StatusOr<std::unique_ptr<ValueLog>> ValueLog::Open(const std::string& dir, Options options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal(fmt::format("cannot create {}: {}", dir, ec.message()));
  std::unique_ptr<ValueLog> log(new ValueLog(dir, std::move(options)));
  if (Status s = log->MapSegments(); !s.ok()) return s;
  return log;
}

Status ValueLog::MapSegments() {
  const int64_t size = options_.segment_bytes;
  for (int i = 0; i < options_.segments; ++i) {
    const std::string path = fmt::format("{}/segment-{}", dir_, i);
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::Internal(fmt::format("cannot open {}: {}", path, strerror(errno)));
    fds_.push_back(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) return Status::Internal(fmt::format("cannot stat {}", path));
    if (st.st_size != size && (st.st_size > size || ftruncate(fd, size) != 0)) {
      return Status::FailedPrecondition(
          fmt::format("{} holds {} bytes, a value log segment {} (a data dir of another build?)",
                      path, st.st_size, size));
    }
    void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      return Status::Internal(fmt::format("cannot map {}: {}", path, strerror(errno)));
    }
    maps_.push_back(static_cast<char*>(map));
  }
  holds_.resize(options_.segments);
  return Status();
}

ValueLog::~ValueLog() {
  for (char* m : maps_) munmap(m, options_.segment_bytes);
  for (int fd : fds_) close(fd);
}

StatusOr<bool> ValueLog::Rotate() {
  for (int k = 1; k <= options_.segments; ++k) {
    const int i = (active_ + k + options_.segments) % options_.segments;
    if (i == active_) continue;
    bool dead = true;
    for (const auto& [pid, lsn] : holds_[i]) dead = dead && options_.dead(pid, lsn);
    if (!dead) continue;
    if (!holds_[i].empty()) {
      if (Status s = options_.before_reuse(); !s.ok()) return s;
      ++reuses_;
    }
    holds_[i].clear();
    active_ = i;
    offset_ = 0;
    return true;
  }
  return false;
}

StatusOr<std::optional<proto::ValueRef>> ValueLog::Append(int32_t pid, uint64_t lsn,
                                                          const void* data, int64_t bytes) {
  return Append(pid, lsn,
                {std::string_view(static_cast<const char*>(data), static_cast<size_t>(bytes))});
}

StatusOr<std::optional<proto::ValueRef>> ValueLog::Append(
    int32_t pid, uint64_t lsn, const std::vector<std::string_view>& parts) {
  int64_t bytes = 0;
  for (std::string_view part : parts) bytes += static_cast<int64_t>(part.size());
  const int64_t need = kAlign + Aligned(bytes);
  if (need > options_.segment_bytes) return std::optional<proto::ValueRef>();
  int segment;
  int64_t offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ < 0 || offset_ + need > options_.segment_bytes) {
      auto rotated = Rotate();
      if (!rotated.ok()) return rotated.status();
      if (!*rotated) return std::optional<proto::ValueRef>();
    }
    segment = active_;
    offset = offset_;
    offset_ += need;
    uint64_t& held = holds_[segment][pid];
    held = std::max(held, lsn);
  }
  // The segment cannot be reused under us: it holds this value, live until a checkpoint of
  // `pid` past `lsn`, which only this partition's owner (the caller) writes.
  // Hashed and written a chunk at a time, so the write reads what the hash just left in the
  // cache instead of the whole value again from memory (the same hash as in one pass).
  constexpr size_t kChunk = 64 << 10;
  StreamHash hash;
  off_t to = static_cast<off_t>(offset + kAlign);
  for (std::string_view part : parts) {
    for (size_t done = 0; done < part.size(); done += kChunk) {
      const size_t n = std::min(kChunk, part.size() - done);
      hash.Update(part.data() + done, n);
      if (pwrite(fds_[segment], part.data() + done, n, to) != static_cast<ssize_t>(n)) {
        return Status::Internal("pwrite");
      }
      to += static_cast<off_t>(n);
    }
  }
  EntryHeader header{kMagic, pid, lsn, static_cast<uint64_t>(bytes), hash.Digest()};
  if (pwrite(fds_[segment], &header, sizeof(header), static_cast<off_t>(offset)) !=
      static_cast<ssize_t>(sizeof(header))) {
    return Status::Internal("pwrite");
  }
  proto::ValueRef ref;
  ref.set_segment(segment);
  ref.set_offset(offset);
  ref.set_length(bytes);
  ref.set_hash(header.hash);
  return std::optional<proto::ValueRef>(std::move(ref));
}

Status ValueLog::Sync(const proto::ValueRef& ref) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t start = static_cast<int64_t>(ref.offset()) / page * page;
  const int64_t end = static_cast<int64_t>(ref.offset()) + kAlign + ref.length();
  if (msync(maps_[ref.segment()] + start, end - start, MS_SYNC) != 0) {
    return Status::Internal(
        fmt::format("{}: syncing segment {}: {}", dir_, ref.segment(), strerror(errno)));
  }
  return Status();
}

StatusOr<const char*> ValueLog::Read(const proto::ValueRef& ref, int32_t pid, uint64_t lsn) const {
  const auto damaged = [&](const char* what) {
    return Status::Malformed(
        fmt::format("{}: the value of partition {}'s log record {} ({} bytes "
                    "at {} in segment {}) {}",
                    dir_, pid, lsn, ref.length(), ref.offset(), ref.segment(), what));
  };
  if (ref.segment() >= maps_.size() || ref.offset() % kAlign != 0 ||
      ref.offset() + kAlign + ref.length() > static_cast<uint64_t>(options_.segment_bytes)) {
    return damaged("lies outside the value log");
  }
  const char* at = maps_[ref.segment()] + ref.offset();
  EntryHeader header;
  std::memcpy(&header, at, sizeof(header));
  if (header.magic != kMagic || header.pid != pid || header.lsn != lsn ||
      header.length != ref.length() || header.hash != ref.hash() ||
      XXH3_64bits_dispatch(at + kAlign, ref.length()) != ref.hash()) {
    return damaged("does not match its hash (it never reached the disk, or was damaged)");
  }
  return at + kAlign;
}

void ValueLog::Hold(const proto::ValueRef& ref, int32_t pid, uint64_t lsn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ref.segment() >= holds_.size()) return;
  uint64_t& held = holds_[ref.segment()][pid];
  held = std::max(held, lsn);
}

int64_t ValueLog::reuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reuses_;
}

}  // namespace hetps
