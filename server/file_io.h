// What the durable store's files share (server/durable_store.h, value_log.h, checkpoint_file.h):
// whole reads and writes of a descriptor, and XXH3 computed a chunk at a time as the bytes go
// by (the same hash as in one pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

struct XXH3_state_s;

namespace hetps {

// Writes or reads all `n` bytes, retrying after signals; false on an error or end of file
// (errno says which).
bool WriteAll(int fd, const char* p, size_t n);
bool ReadAll(int fd, char* p, size_t n);

// XXH3 (64 bits) over everything given to Update, with the widest vector unit this CPU has.
class StreamHash {
 public:
  StreamHash();
  ~StreamHash();
  StreamHash(const StreamHash&) = delete;
  StreamHash& operator=(const StreamHash&) = delete;
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  XXH3_state_s* state_;
};

}  // namespace hetps
