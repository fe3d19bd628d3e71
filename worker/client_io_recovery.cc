// ClientIo's server recovery: a dead server's requests wait for it to come back (then go again,
// in order, on a new connection) or for the recovery timeout (then fail); and requests whose
// arrays a server was lent (a co-located transport) complete only once it let go of them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "worker/client_io.h"

namespace hetps {

void ClientIo::OnServerDead(int rank) {
  if (retired_.contains(rank)) return LeaveRetired(rank);  // drained: nothing goes there
  DropBatch(rank);
  revoking_.erase(rank);   // its exit, not its answer, releases what it was lent
  servers_[rank].close();  // drops queued frames, releasing the caller's buffers
  ++sockets_changed_;
  // A restarted server has not attached: what goes to it goes on its socket.
  if (transports_[rank]) transports_[rank]->Detach();
  if (options_.server_recovery_timeout_ms <= 0) {
    spdlog::error("server rank {} is dead; its requests fail", rank);
    dead_servers_.insert(rank);
    FailPending(rank, Status::Unavailable(fmt::format("server rank {} died", rank)));
    return;
  }
  spdlog::warn("server rank {} is dead; its requests wait up to {} ms for it to come back", rank,
               options_.server_recovery_timeout_ms);
  recovering_[rank] = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(options_.server_recovery_timeout_ms);
}

// The restarted server restored its shards: everything it did not answer goes again, in the
// order it was first sent (it applies each numbered update once), then what waited meanwhile.
void ClientIo::OnServerBack(const proto::Header& h) {
  const proto::NodeInfo* node = nullptr;
  for (const proto::NodeInfo& n : h.view().nodes()) {
    if (n.id() == h.node() && n.role() == proto::SERVER) node = &n;
  }
  if (node == nullptr || node->rank() < 0 || node->rank() > ranks()) {
    spdlog::warn("ignoring a malformed SERVER_BACK for node {}", h.node());
    return;
  }
  const int rank = node->rank();
  if (rank == ranks()) {  // a new rank (docs/resharding.md): partitions move to it next
    if (Status s = AddRank(h, *node); !s.ok()) {
      spdlog::error("cannot use server rank {}: {}", rank, s.ToString());
      return;
    }
    if (clock_ != nullptr) {  // its gate counts this worker from where it is
      proto::Header sync;
      sync.set_type(proto::CLOCK_SYNC);
      sync.set_sender(link_.id());
      sync.set_clock(clock_->load());
      Emit(rank, sync, {});
    }
    return;
  }
  server_rank_[node->id()] = rank;
  if (!recovering_.erase(rank) && !dead_servers_.erase(rank)) return;  // never lost it
  if (Status s = Connect(*node); !s.ok()) {
    spdlog::error("cannot reconnect to the restarted server: {}", s.ToString());
    dead_servers_.insert(rank);
    FailPending(rank, Status::Unavailable(s.message()));
    return;
  }
  // Its consistency gate starts over: first where this worker is (it may send it nothing more).
  if (clock_ != nullptr) {
    proto::Header sync;
    sync.set_type(proto::CLOCK_SYNC);
    sync.set_sender(link_.id());
    sync.set_clock(clock_->load());
    Emit(rank, sync, {});
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) {
    if (p.target == rank) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    Pending& p = pending_[id];
    std::vector<zmq::message_t> payload;
    if (p.encoded) {
      payload.push_back(SharedFrame(p.encoded));
    } else if (p.src != nullptr) {
      p.op->Expect();  // the caller's buffer is lent once more
      payload.emplace_back(const_cast<float*>(p.src), p.src_bytes, ReleaseCallerBuffer,
                           new OpPtr(p.op));
    }
    SendToServer(rank, proto::Header(*p.header), std::move(payload));  // kept for another restart
  }
  spdlog::info("server rank {} is back at {}; resent {} unanswered requests", rank, node->address(),
               ids.size());
  std::vector<Outgoing> parked = std::move(parked_[rank]);
  parked_.erase(rank);
  for (Outgoing& o : parked) Dispatch(o);
}

void ClientIo::ExpireRecoveries() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = recovering_.begin(); it != recovering_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const int rank = it->first;
    it = recovering_.erase(it);
    const Status s =
        Status::Unavailable(fmt::format("server rank {} died and did not come back in {} ms", rank,
                                        options_.server_recovery_timeout_ms));
    spdlog::error("{}", s.message());
    dead_servers_.insert(rank);
    FailPending(rank, s);
    for (Outgoing& o : parked_[rank]) {
      FailOutgoing(o, s);
    }
    parked_.erase(rank);
  }
}

bool ClientIo::Lends(int rank) const {
  for (const Lent& l : lent_) {
    if (l.target == rank) return true;
  }
  return false;
}

void ClientIo::Finish(uint64_t id, Pending& p, const Status& s, const proto::Header* h,
                      bool answered) {
  if (!p.via) {
    p.op->Complete(s, h);
    return;
  }
  p.via->Release(p.slot);
  // A reply from the server it was lent to means that server is done with the array; a
  // restarted server's reply says nothing about the process it replaced.
  const bool by_lender = answered && p.via == transports_[p.target] && p.via->attached();
  if (!p.slot.lent || by_lender || p.via->Released()) {
    p.op->Complete(s, h);
    return;
  }
  const int rank = p.target;
  const bool ask = !Lends(rank) && p.via == transports_[rank] && servers_[rank].handle() != nullptr;
  lent_.push_back({id, rank, p.op, s, p.via, p.slot.keep});
  if (ask) {  // a live server: asked to let go, and heard until it answers (revoking_)
    p.via->Detach();
    proto::Header revoke;
    revoke.set_type(proto::CMA_REVOKE);
    revoke.set_sender(link_.id());
    hetps::Send(servers_[rank], revoke, {});
    dirty_[rank] = 1;
  }
}

void ClientIo::ReleaseLent() {
  if (lent_.empty()) return;
  std::erase_if(lent_, [](Lent& l) {
    if (!l.via->Released()) return false;
    l.op->Complete(l.status);
    return true;
  });
  for (auto it = revoking_.begin(); it != revoking_.end();) {
    if (Lends(*it)) {
      ++it;
      continue;
    }
    servers_[*it].close();
    ++sockets_changed_;
    it = revoking_.erase(it);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!lent_.empty() && now - lent_logged_ > std::chrono::seconds(5)) {
    if (lent_logged_ != std::chrono::steady_clock::time_point{}) {
      spdlog::warn(
          "{} failed requests wait for their servers (rank {} first) to answer or exit: the "
          "server may still read or write the caller's arrays, which stay lent until then",
          lent_.size(), lent_.front().target);
    }
    lent_logged_ = now;
  }
}

// A server whose requests failed while it may still touch their arrays: its answer to
// CMA_REVOKE releases them all, and a late reply the one it answers.
void ClientIo::OnRevokingMessage(Envelope& env, int from) {
  if (IsBatch(env)) {
    std::vector<Envelope> parts;
    if (!Unbatch(env, parts).ok()) return;
    for (Envelope& part : parts) OnRevokingMessage(part, from);
    return;
  }
  if (!env.status.ok()) return;
  const proto::Header& h = env.message.header;
  if (h.type() == proto::CMA_REVOKE_REPLY) {
    for (Lent& l : lent_) {
      if (l.target == from) l.via->OnRevoked();
    }
    return;
  }
  std::erase_if(lent_, [&](Lent& l) {
    if (l.target != from || l.id != h.request_id()) return false;
    l.op->Complete(l.status);
    return true;
  });
}

}  // namespace hetps
