// The cross memory attach transport (worker/transport.h): the server reads a push's payload
// and writes a pull's values in this process's memory itself (server/cma_peers.h), so the
// caller's arrays are copied once, by the server's apply threads, and never by this worker.
//
// The arrays are lent: the server may touch them until it answers. A request that fails
// without an answer (the cluster closed, the client stopped) hands its array back only once
// the server answered CMA_REVOKE or its process exited (a pidfd says so), which ClientIo waits
// for; a server declared dead the same way.
#include <fmt/format.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/cross_memory.h"
#include "worker/client_io.h"
#include "worker/transport.h"

namespace hetps {
namespace {

// Smaller requests go in frames: they share messages (batches), and a copy that small costs
// less than the system call that would replace it.
constexpr int64_t kMinBytes = int64_t{16} << 10;

class CmaTransport : public Transport {
 public:
  CmaTransport(int server_exit_fd, ClientReport& report)
      : exit_fd_(server_exit_fd), report_(report) {}
  ~CmaTransport() override { close(exit_fd_); }
  CmaTransport(const CmaTransport&) = delete;
  CmaTransport& operator=(const CmaTransport&) = delete;
  const char* name() const override { return "cma"; }

  void Prepare(Outgoing& o, TransportSlot& slot) override {
    const proto::MsgType type = o.header.type();
    if (!o.header.codec().empty()) return;
    const void* address = nullptr;
    std::shared_ptr<const void> keep;
    int64_t bytes = 0;
    if ((type == proto::PUSH || type == proto::INIT) && o.payload.size() == 1) {
      // The caller's floats (valid until the operation completes) or bytes held with it.
      const void* data = o.payload[0].data();
      if (data == o.src) {
        address = o.src;
      } else if (o.encoded && data == o.encoded->data()) {
        address = data;
        keep = o.encoded;
      } else {
        return;
      }
      bytes = static_cast<int64_t>(o.payload[0].size());
    } else if (type == proto::PULL) {
      address = o.dst;
      bytes = o.dst_len * static_cast<int64_t>(sizeof(float));
    }
    if (address == nullptr || bytes < kMinBytes) return;
    if (type != proto::PULL) {
      o.payload.clear();  // no frame: the server reads the array (lent until it answers)
      report_.OnSharedMemory(bytes);
    }
    o.header.set_cma_address(reinterpret_cast<uintptr_t>(address));
    o.header.set_cma_length(bytes);
    slot.length = bytes;
    slot.lent = true;
    slot.keep = std::move(keep);
  }

  Status AcceptPull(const proto::Header& h, const TransportSlot& slot, float* /*dst*/,
                    size_t bytes) override {
    if (!slot.lent || h.cma_length() != static_cast<int64_t>(bytes) || h.shm_length() != 0) {
      return Status::SizeMismatch("answered through cross memory attach with a wrong size");
    }
    report_.OnSharedMemory(static_cast<int64_t>(bytes));  // the server wrote them already
    return Status();
  }

  void Release(const TransportSlot& /*slot*/) override {}

  bool Released() const override {
    if (revoked_) return true;
    pollfd p{exit_fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;  // a pidfd is readable once the process exited
  }
  void OnRevoked() override { revoked_ = true; }

 private:
  const int exit_fd_;
  ClientReport& report_;
  bool revoked_ = false;
};

StatusOr<std::unique_ptr<Transport>> OpenCma(const TransportContext& c) {
  // The probe: the server's random value goes in the first word, its complement comes back
  // in the second.
  auto probe = std::make_unique<volatile uint64_t[]>(2);
  proto::Header claim;
  claim.set_type(proto::CMA_ATTACH);
  claim.set_cma_pid(getpid());
  claim.set_pid_namespace(PidNamespace());
  claim.set_cma_address(reinterpret_cast<uintptr_t>(probe.get()));
  auto challenge = c.ask(claim);
  if (!challenge.ok()) return challenge.status();
  if (challenge->type() != proto::CMA_ATTACH_REPLY || challenge->cma_probe() == 0) {
    return Status::Malformed("CMA_ATTACH answered without a probe");
  }
  probe[0] = challenge->cma_probe();
  probe[1] = 0;
  proto::Header confirm = claim;
  confirm.set_cma_probe(challenge->cma_probe());
  auto confirmed = c.ask(confirm);
  if (!confirmed.ok()) return confirmed.status();
  if (confirmed->type() != proto::CMA_ATTACH_REPLY || confirmed->cma_pid() <= 0 ||
      probe[1] != ~challenge->cma_probe()) {
    return Status::Malformed("the server did not answer the probe");
  }
  // The lent arrays' safety rests on knowing when the server's process is gone.
  // Through syscall(): Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.
  const int exit_fd =
      static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(confirmed->cma_pid()), 0u));
  if (exit_fd < 0) {
    return Status::FailedPrecondition(
        fmt::format("pidfd_open({}): {}", confirmed->cma_pid(), std::strerror(errno)));
  }
  return std::unique_ptr<Transport>(new CmaTransport(exit_fd, c.report));
}

}  // namespace

TransportInfo CmaTransportInfo() {
  return {"cma",
          "cross memory attach: the server reads and writes the caller's arrays (requests of 16 "
          "KiB or more), one copy each way, none by this worker",
          OpenCma};
}

}  // namespace hetps
