#include "server/checkpoint_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "server/file_io.h"

namespace hetps {
namespace {

constexpr uint32_t kFileMagic = 0x66634548;  // "HEcf"
struct FileHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t meta_bytes;
  uint64_t array_bytes;
  uint64_t hash;
};
constexpr size_t kChunk = 1 << 20;
constexpr uint64_t kMaxMetaBytes = 1u << 30;

// Writes everything after the header, hashing it as it goes.
bool WriteBody(int fd, const std::string& meta, const std::vector<const float*>& arrays,
               size_t array_bytes, StreamHash& hash) {
  hash.Update(meta.data(), meta.size());
  if (!WriteAll(fd, meta.data(), meta.size())) return false;
  for (const float* array : arrays) {
    const char* bytes = reinterpret_cast<const char*>(array);
    for (size_t at = 0; at < array_bytes; at += kChunk) {
      const size_t n = std::min(kChunk, array_bytes - at);
      hash.Update(bytes + at, n);
      if (!WriteAll(fd, bytes + at, n)) return false;
    }
  }
  return true;
}

}  // namespace

Status WriteCheckpointFile(const std::string& path, const proto::PartitionCheckpoint& meta,
                           const std::vector<const float*>& arrays, size_t array_bytes, bool sync) {
  const std::string meta_bytes = meta.SerializeAsString();
  FileHeader header{kFileMagic, 0, meta_bytes.size(), array_bytes * arrays.size(), 0};
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto failed = [&](const char* what) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    unlink(path.c_str());
    return Status::Internal(fmt::format("{} checkpoint file {}: {}", what, path, why));
  };
  if (fd < 0) return failed("creating");
  StreamHash hash;
  if (!WriteAll(fd, reinterpret_cast<const char*>(&header), sizeof(header)) ||
      !WriteBody(fd, meta_bytes, arrays, array_bytes, hash)) {
    return failed("writing");
  }
  header.hash = hash.Digest();
  if (pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return failed("writing");
  }
  if (sync && fdatasync(fd) != 0) return failed("syncing");
  if (close(fd) != 0) {
    const std::string why = strerror(errno);
    unlink(path.c_str());
    return Status::Internal(fmt::format("writing checkpoint file {}: {}", path, why));
  }
  return Status();
}

Status ReadCheckpointFile(const std::string& path, proto::PartitionCheckpoint& meta,
                          const std::vector<float*>& arrays, size_t array_bytes) {
  const std::string what = "checkpoint file " + path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Malformed(fmt::format("{}: {}", what, strerror(errno)));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    close(*f);
    delete f;
  });
  struct stat st;
  FileHeader header;
  if (fstat(fd, &st) != 0 || !ReadAll(fd, reinterpret_cast<char*>(&header), sizeof(header)) ||
      header.magic != kFileMagic) {
    return Status::Malformed(what + " is damaged (no checkpoint header)");
  }
  const uint64_t want = array_bytes * arrays.size();
  if (header.array_bytes != want || header.meta_bytes > kMaxMetaBytes ||
      static_cast<uint64_t>(st.st_size) !=
          sizeof(header) + header.meta_bytes + header.array_bytes) {
    return Status::Malformed(fmt::format(
        "{} is damaged: {} bytes holding {} bytes of arrays, where this partition keeps {}", what,
        st.st_size, header.array_bytes, want));
  }
  StreamHash hash;
  std::string meta_bytes(header.meta_bytes, '\0');
  if (!ReadAll(fd, meta_bytes.data(), meta_bytes.size())) {
    return Status::Malformed(what + " is damaged (short)");
  }
  hash.Update(meta_bytes.data(), meta_bytes.size());
  for (float* array : arrays) {
    char* bytes = reinterpret_cast<char*>(array);
    for (size_t at = 0; at < array_bytes; at += kChunk) {
      const size_t n = std::min(kChunk, array_bytes - at);
      if (!ReadAll(fd, bytes + at, n)) return Status::Malformed(what + " is damaged (short)");
      hash.Update(bytes + at, n);
    }
  }
  if (hash.Digest() != header.hash || !meta.ParseFromString(meta_bytes)) {
    return Status::Malformed(what + " is damaged (its hash does not match)");
  }
  return Status();
}

}  // namespace hetps
