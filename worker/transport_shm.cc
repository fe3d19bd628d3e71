// The shared memory transport (worker/transport.h): payloads go through a segment this worker
// makes (worker/shm_channel.h) and the server maps (SHM_ATTACH).
#include <fmt/format.h>

#include <cstring>

#include "worker/client_io.h"
#include "worker/shm_channel.h"
#include "worker/transport.h"

namespace hetps {
namespace {

class ShmTransport : public Transport {
 public:
  ShmTransport(std::unique_ptr<ShmChannel> channel, ClientReport& report)
      : channel_(std::move(channel)), report_(report) {}
  const char* name() const override { return "shm"; }

  void Prepare(Outgoing& o, TransportSlot& slot) override {
    const proto::MsgType type = o.header.type();
    int64_t bytes = 0;
    if ((type == proto::PUSH || type == proto::INIT) && o.payload.size() == 1) {
      bytes = static_cast<int64_t>(o.payload[0].size());
    } else if (type == proto::PULL && o.header.codec().empty()) {
      bytes = o.dst_len * static_cast<int64_t>(sizeof(float));
    } else {
      return;
    }
    const std::optional<int64_t> at = channel_->Allocate(bytes);
    if (!at) return;  // full: this one goes in frames
    if (type != proto::PULL) {
      std::memcpy(channel_->At(*at), o.payload[0].data(), static_cast<size_t>(bytes));
      o.payload.clear();  // the caller's buffer is free now
      report_.OnSharedMemory(bytes);
    }
    o.header.set_shm_offset(*at);
    o.header.set_shm_length(bytes);
    slot.offset = *at;
    slot.length = bytes;
  }

  Status AcceptPull(const proto::Header& h, const TransportSlot& slot, float* dst,
                    size_t bytes) override {
    if (slot.offset < 0 || h.shm_length() != static_cast<int64_t>(bytes) || h.cma_length() != 0) {
      return Status::SizeMismatch("answered in shared memory with a wrong size or slot");
    }
    std::memcpy(dst, channel_->At(slot.offset), bytes);
    report_.OnSharedMemory(static_cast<int64_t>(bytes));
    return Status();
  }

  void Release(const TransportSlot& slot) override {
    // A server declared dead may yet write into its slots: those are never reused.
    if (slot.offset >= 0 && attached()) channel_->Free(slot.offset);
  }

 private:
  std::unique_ptr<ShmChannel> channel_;
  ClientReport& report_;
};

StatusOr<std::unique_ptr<Transport>> OpenShm(const TransportContext& c) {
  if (c.options.shared_memory_bytes <= 0) {
    return Status::FailedPrecondition("shared_memory_bytes is 0");
  }
  auto channel = ShmChannel::Create(c.incarnation, c.server_rank,
                                    static_cast<size_t>(c.options.shared_memory_bytes));
  if (!channel.ok()) return channel.status();
  proto::Header h;
  h.set_type(proto::SHM_ATTACH);
  h.set_shm_name((*channel)->name());
  h.set_shm_length(static_cast<int64_t>((*channel)->size()));
  auto reply = c.ask(std::move(h));
  if (!reply.ok()) return reply.status();
  if (reply->type() != proto::SHM_ATTACH_REPLY) {
    return Status::Malformed("SHM_ATTACH answered with " + proto::MsgType_Name(reply->type()));
  }
  (*channel)->Unlink();  // mapped on both sides: nothing is left behind if either dies
  return std::unique_ptr<Transport>(new ShmTransport(std::move(*channel), c.report));
}

}  // namespace

TransportInfo ShmTransportInfo() {
  return {"shm",
          "a shared memory segment per server (ClientOptions::shared_memory_bytes): a push is "
          "copied in by this worker, a pull copied out",
          OpenShm};
}

}  // namespace hetps
