#include "common/shm_segment.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hetps {

bool ShmSegment::ValidName(const std::string& name) {
  constexpr char kPrefix[] = "/hetps-";
  if (name.size() <= sizeof(kPrefix) - 1 || name.size() > 128 || name.rfind(kPrefix, 0) != 0) {
    return false;
  }
  for (size_t i = sizeof(kPrefix) - 1; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return true;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, size_t bytes) {
  if (!ValidName(name)) return Status::InvalidArgument("bad shared memory name '" + name + "'");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return Status::Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status::Unavailable(fmt::format("ftruncate {}: {}", name, std::strerror(e)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status::Unavailable(fmt::format("mmap {}: {}", name, std::strerror(e)));
  }
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(name, fd, static_cast<uint8_t*>(data), bytes, /*owner=*/true));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, size_t bytes) {
  if (!ValidName(name)) return Status::InvalidArgument("bad shared memory name '" + name + "'");
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return Status::Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(bytes)) {
    close(fd);
    return Status::InvalidArgument(
        fmt::format("shared memory {} is not {} bytes long", name, bytes));
  }
  // Payloads go through it under --auth=curve too: only a segment private to this user (as
  // Create makes them) keeps them from every other user, as the process's own memory is.
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    return Status::PermissionDenied(
        fmt::format("shared memory {} is not private to this user (owner {}, mode {:o})", name,
                    st.st_uid, st.st_mode & 0777));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (data == MAP_FAILED) {
    return Status::Unavailable(fmt::format("mmap {}: {}", name, std::strerror(e)));
  }
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(name, -1, static_cast<uint8_t*>(data), bytes, /*owner=*/false));
}

void ShmSegment::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  shm_unlink(name_.c_str());
}

Status ShmSegment::Reserve(size_t bytes) {
  bytes = std::min(bytes, size_);
  if (bytes <= reserved_) return Status();
  if (fd_ < 0) return Status::FailedPrecondition("only the creator reserves a shared segment");
  if (const int e = posix_fallocate(fd_, 0, static_cast<off_t>(bytes)); e != 0) {
    return Status::Unavailable(
        fmt::format("reserving {} bytes of {}: {}", bytes, name_, std::strerror(e)));
  }
  reserved_ = bytes;
  return Status();
}

ShmSegment::~ShmSegment() {
  munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  if (owner_) Unlink();
}

}  // namespace hetps
