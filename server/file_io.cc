#include "server/file_io.h"

#include <unistd.h>
#include <xxh_x86dispatch.h>  // XXH3 with the widest vector unit this CPU has

#include <cerrno>
#include <new>

namespace hetps {

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

StreamHash::StreamHash() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_);
}

StreamHash::~StreamHash() { XXH3_freeState(state_); }

void StreamHash::Update(const void* data, size_t n) {
  XXH3_64bits_update_dispatch(state_, data, n);
}

uint64_t StreamHash::Digest() const { return XXH3_64bits_digest(state_); }

}  // namespace hetps
