// ShmSegment: a POSIX shared memory segment (shm_open + mmap) that a worker creates and a
// server on the same machine maps, so that payloads between them are copied through memory
// instead of through the kernel's TCP stack (the co-located transport; worker/shm_channel.h).
// The creator makes it 0600 (only the same user can map it) and unlinks the name once the
// peer mapped it, so nothing is left in /dev/shm when either process dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace hetps {

class ShmSegment {
 public:
  // Names this project creates: "/hetps-" then letters, digits and '-' (checked by Open, since
  // a name arrives in a request).
  static bool ValidName(const std::string& name);
  // Creates and maps a new segment of `bytes` (fails if the name exists).
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes);
  // Maps an existing segment, which must be exactly `bytes` long.
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);
  ~ShmSegment();  // unmaps; the creator also unlinks the name if it still exists
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid in every process that has it).
  void Unlink();
  // The creator: makes sure the first `bytes` are backed by memory (posix_fallocate), so that
  // touching them can never raise SIGBUS in either process when /dev/shm is full. Fails, and
  // changes nothing, when there is no room. A segment is created sparse: nothing is reserved
  // until asked for.
  Status Reserve(size_t bytes);
  size_t reserved() const { return reserved_; }

 private:
  ShmSegment(std::string name, int fd, uint8_t* data, size_t size, bool owner)
      : name_(std::move(name)), fd_(fd), data_(data), size_(size), owner_(owner) {}
  std::string name_;
  int fd_;  // the creator's, for Reserve; -1 in a process that opened it
  uint8_t* data_;
  size_t size_;
  bool owner_;
  bool unlinked_ = false;
  size_t reserved_ = 0;
};

}  // namespace hetps
