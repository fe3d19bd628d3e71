#include "common/cross_memory.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace hetps {
namespace {

Status ErrnoStatus(int err, pid_t pid, uint64_t address, size_t bytes, const char* what) {
  const std::string text = fmt::format("{} {} bytes at {:#x} of process {}: {}", what, bytes,
                                       address, pid, std::strerror(err));
  switch (err) {
    case ESRCH:
      return Status::Unavailable(text);
    case EFAULT:
    case EINVAL:
      return Status::InvalidArgument(text);
    case EPERM:
      return Status::PermissionDenied(text);
    case ENOSYS:
      return Status::FailedPrecondition(text);
    default:
      return Status::Internal(text);
  }
}

template <typename Op>
Status Transfer(pid_t pid, uint64_t address, uint8_t* local, size_t bytes, const char* what,
                Op op) {
  size_t done = 0;
  while (done < bytes) {
    iovec mine{local + done, bytes - done};
    iovec theirs{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)), bytes - done};
    const ssize_t n = op(pid, &mine, 1, &theirs, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, pid, address, bytes, what);
    if (n == 0) return ErrnoStatus(EFAULT, pid, address, bytes, what);
    done += static_cast<size_t>(n);
  }
  return Status();
}

}  // namespace

uint64_t PidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

Status ReadProcessMemory(pid_t pid, uint64_t address, void* dst, size_t bytes) {
  return Transfer(pid, address, static_cast<uint8_t*>(dst), bytes, "reading", process_vm_readv);
}

Status WriteProcessMemory(pid_t pid, uint64_t address, const void* src, size_t bytes) {
  // process_vm_writev only reads the local side.
  return Transfer(pid, address, static_cast<uint8_t*>(const_cast<void*>(src)), bytes, "writing",
                  process_vm_writev);
}

}  // namespace hetps
