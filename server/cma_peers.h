// CmaPeers: the workers on this machine whose memory this server reads and writes itself
// (the cross memory attach transport, worker/transport_cma.cc). A push then costs one copy,
// made by the apply thread that owns the partition, straight from the caller's gradient into
// the update's buffer, and a pull one copy from the partition's values into the caller's
// array; the worker copies nothing.
//
// The worker lends its arrays until it hears back: a request is read or written only while
// it is served, before its reply, and never after the worker's CMA_REVOKE was answered
// (Revoke waits for copies in progress). So the worker may give a caller's array back once it
// has the reply, the revocation's answer, or this process's exit.
//
// Thread-safety: every method may be called from any thread; copies of one worker run in
// parallel with each other and exclude only Revoke and Forget of that worker.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "common/status.h"

namespace hetps {

class CmaPeers {
 public:
  // The handshake, in two steps, because a worker's word for its process id proves nothing:
  // Challenge takes worker `worker`'s claim (process `pid` in the pid namespace of inode
  // `pid_namespace`, 16 bytes at `address`) and returns a random probe; once the worker put it
  // there, Confirm reads it back (only that process could have), writes its complement in the
  // following 8 bytes, and from then on serves the worker's requests that name its memory. An
  // error says why not (another pid namespace or user, no permission, a wrong probe); the
  // worker stays on its socket. The pid must be another process of this user.
  StatusOr<uint64_t> Challenge(int32_t worker, pid_t pid, uint64_t pid_namespace, uint64_t address);
  Status Confirm(int32_t worker, uint64_t probe);
  // Nothing of `worker`'s memory is touched from the return on (copies in progress end first).
  void Revoke(int32_t worker);
  // The worker died or left.
  void Forget(int32_t worker) { Revoke(worker); }
  bool Attached(int32_t worker) const;

  // A served request's copies. FAILED_PRECONDITION when the worker is not attached (or was
  // revoked); otherwise what the kernel said (common/cross_memory.h).
  Status Read(int32_t worker, uint64_t address, void* dst, size_t bytes) const;
  Status Write(int32_t worker, uint64_t address, const void* src, size_t bytes) const;

 private:
  struct Peer {
    pid_t pid = 0;
    mutable std::shared_mutex mu;  // shared: a copy in progress; exclusive: revoking
    bool revoked = false;
  };
  std::shared_ptr<Peer> Find(int32_t worker) const;
  template <typename Copy>
  Status WithPeer(int32_t worker, Copy copy) const;

  struct Claim {
    pid_t pid = 0;
    uint64_t address = 0, probe = 0;
  };

  mutable std::mutex mu_;  // guards peers_ and claims_
  std::unordered_map<int32_t, std::shared_ptr<Peer>> peers_;
  std::unordered_map<int32_t, Claim> claims_;  // challenged, not yet confirmed
};

}  // namespace hetps
