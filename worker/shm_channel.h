// ShmChannel: the co-located transport between a worker and one server on the same machine.
// The worker's I/O thread copies each push's payload into a slot of a shared memory segment
// (common/shm_segment.h) the server mapped, and a pull's reply is written by the server into a
// slot; only the header travels over the ZeroMQ socket. That takes the payload out of the
// kernel's TCP stack: one memcpy each way instead of two copies through socket buffers plus
// ZeroMQ's framing. A request that finds no free slot goes over TCP as usual, so the segment's
// size bounds memory, never correctness.
//
// Thread-safety: none; the client's I/O thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/shm_segment.h"
#include "common/status.h"

namespace hetps {

// True when `endpoint` (a server's "tcp://HOST:PORT" or "ipc://...") names this machine as
// seen from this process's network namespace: an ipc endpoint, or a HOST that is, or resolves
// to, an address of one of this namespace's interfaces (loopback included). Servers in other
// network namespaces of the same machine (emulated hosts) are not co-located: their traffic is
// meant to cross the emulated link.
bool IsLocalEndpoint(const std::string& endpoint);

class ShmChannel {
 public:
  // A new segment of `bytes`, named after this process, `tag` and `rank`.
  static StatusOr<std::unique_ptr<ShmChannel>> Create(uint64_t tag, int rank, size_t bytes);

  const std::string& name() const { return segment_->name(); }
  size_t size() const { return segment_->size(); }
  // Once the server mapped it: the name is no longer needed.
  void Unlink() { segment_->Unlink(); }

  // A slot of `bytes` (64-byte aligned) within the memory reserved behind the segment, or
  // nullopt when none is free or no more can be reserved.
  std::optional<int64_t> Allocate(int64_t bytes);
  void Free(int64_t offset);
  uint8_t* At(int64_t offset) const { return segment_->data() + offset; }
  int64_t allocated_bytes() const { return allocated_bytes_; }
  size_t reserved_bytes() const { return segment_->reserved(); }

  // False once its server died: a restarted server has not mapped it, so nothing new is sent
  // through it (slots still out are freed as their requests complete).
  bool attached = true;

 private:
  explicit ShmChannel(std::unique_ptr<ShmSegment> segment);
  std::unique_ptr<ShmSegment> segment_;
  std::map<int64_t, int64_t> free_;  // offset -> bytes, coalesced
  std::map<int64_t, int64_t> used_;  // offset -> bytes
  int64_t allocated_bytes_ = 0;
};

}  // namespace hetps
