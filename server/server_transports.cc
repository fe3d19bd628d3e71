// ServerLoop: the co-located transports (server_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_loop.h"

namespace hetps {

void ServerLoop::AttachShm(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (Status s = CheckSender(env); !s.ok()) return Reject(env, s);
  Status s;
  if (h.shm_length() <= 0 || h.shm_length() > (int64_t{1} << 32)) {
    s = Status::InvalidArgument(fmt::format("a shared memory segment of {} bytes", h.shm_length()));
  } else {
    auto segment = ShmSegment::Open(h.shm_name(), static_cast<size_t>(h.shm_length()));
    if (segment.ok()) {
      shm_[h.sender()] = std::move(*segment);
      spdlog::debug("worker {}: payloads through shared memory {}", h.sender(), h.shm_name());
      return Reply(env.identity, ReplyTo(h, proto::SHM_ATTACH_REPLY, link_->id()));
    }
    s = segment.status();
  }
  spdlog::info("worker {} stays on TCP: {}", h.sender(), s.ToString());
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

void ServerLoop::AttachCma(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (Status s = CheckSender(env); !s.ok()) return Reject(env, s);
  proto::Header r = ReplyTo(h, proto::CMA_ATTACH_REPLY, link_->id());
  Status s;
  if (h.cma_probe() == 0) {  // the claim: answered with a probe to put there
    auto probe = cma_.Challenge(h.sender(), static_cast<pid_t>(h.cma_pid()), h.pid_namespace(),
                                h.cma_address());
    if (probe.ok()) {
      r.set_cma_probe(*probe);
      return Reply(env.identity, std::move(r));
    }
    s = probe.status();
  } else if (s = cma_.Confirm(h.sender(), h.cma_probe()); s.ok()) {
    spdlog::debug("worker {}: payloads through cross memory attach", h.sender());
    r.set_cma_pid(getpid());
    return Reply(env.identity, std::move(r));
  }
  spdlog::info("worker {} gets no cross memory attach: {}", h.sender(), s.ToString());
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

// Answered only once no copy of the worker's memory is in progress or can start.
void ServerLoop::RevokeCma(Envelope& env) {
  const proto::Header& h = env.message.header;
  // Whatever the worker's standing (one declared dead or gone was forgotten already, and its
  // client waits for this answer): only its own connection may ask.
  if (!IsNodeIdentity(env.identity, h.sender())) {
    return Reject(env, Status::Unregistered(
                           fmt::format("this connection does not speak for node {}", h.sender())));
  }
  cma_.Revoke(h.sender());
  Reply(env.identity, ReplyTo(h, proto::CMA_REVOKE_REPLY, link_->id()));
}

Status ServerLoop::BorrowShm(Envelope& env) {
  const proto::Header& h = env.message.header;
  auto it = shm_.find(h.sender());
  if (it == shm_.end()) {
    return Status::FailedPrecondition("this worker has no shared memory segment here");
  }
  const int64_t offset = h.shm_offset(), length = h.shm_length();
  const int64_t size = static_cast<int64_t>(it->second->size());
  if (!env.message.payload.empty() || offset < 0 || length <= 0 || offset > size ||
      length > size - offset) {
    return Status::Malformed(fmt::format(
        "shared memory slot [{}, +{}) with {} frame(s) is not within the segment of {} bytes",
        offset, length, env.message.payload.size(), size));
  }
  using Mapping = std::shared_ptr<ShmSegment>;
  env.message.payload.emplace_back(
      it->second->data() + offset, static_cast<size_t>(length),
      [](void*, void* hint) { delete static_cast<Mapping*>(hint); }, new Mapping(it->second));
  return Status();
}

}  // namespace hetps
