// ClientIo's turn: who drives the sockets (the I/O thread, or a calling thread holding the
// IoGate), how a turn sleeps on the sockets' descriptors and what it looks at when it wakes.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "worker/client_io.h"

namespace hetps {

void Ticket::State::WakeLeader() const {
  const uint64_t one = 1;
  if (gate && gate->done_fd >= 0) (void)!write(gate->done_fd, &one, sizeof(one));
}

void LeadUntilDone(Ticket::State& op) {
  IoGate& gate = *op.gate;
  // The first waiter takes the sockets over (the I/O thread holds them only for a turn); a
  // later one leaves them to whoever drives and is woken through op's condition variable.
  const bool first = gate.leaders.fetch_add(1) == 0;
  std::unique_lock<std::mutex> io(gate.mu, std::defer_lock);
  if (first) {
    io.lock();
  } else {
    (void)io.try_lock();
  }
  if (io.owns_lock() && gate.io != nullptr) {
    {
      std::lock_guard<std::mutex> lock(op.mu);
      op.led = op.remaining > 0;
    }
    bool leading = op.led;
    while (leading && gate.io->LeadTurn()) {
      std::lock_guard<std::mutex> lock(op.mu);
      leading = op.remaining > 0;
    }
    {
      std::lock_guard<std::mutex> lock(op.mu);
      op.led = false;
    }
    gate.io->LetGo();
  }
  if (io.owns_lock()) io.unlock();
  gate.leaders.fetch_sub(1);
}

void ClientIo::Nudge() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  (void)wake_out_.send(zmq::message_t(), zmq::send_flags::none);
}

bool ClientIo::LeadTurn() {
  if (stopping_.load()) return false;
  Turn(PollTimeoutMs(), gate_->done_fd, nullptr);
  return true;
}

bool ClientIo::Heard(int rank) const {
  return revoking_.contains(rank) || (!dead_servers_.contains(rank) && !recovering_.contains(rank));
}

bool ClientIo::AnyDirty() const {
  if (link_dirty_) return true;
  for (int r = 0; r < static_cast<int>(dirty_.size()); ++r) {
    if (dirty_[r] && Heard(r)) return true;  // a socket not heard is not looked at
  }
  return false;
}

void ClientIo::LetGo() {
  // Sends consume the signals of the sockets' descriptors: what arrived meanwhile is handled
  // here, so that each descriptor the I/O thread sleeps on signals whatever comes next.
  for (int turns = 0; turns < 16 && AnyDirty(); ++turns) DrainDirty();
  if (!sleeping_) return;
  Watched(items_, item_ranks_);
  bool same =
      !AnyDirty() && sockets_changed_ == slept_changed_ && items_.size() == slept_on_.size();
  for (size_t i = 0; same && i < items_.size(); ++i) same = items_[i].socket == slept_on_[i];
  // The I/O thread takes over what is still coming in, and sockets that closed or opened.
  if (!same) Nudge();
}

void ClientIo::Watched(std::vector<zmq::pollitem_t>& items, std::vector<int>& ranks) {
  items.assign(
      {{wake_in_.handle(), 0, ZMQ_POLLIN, 0}, {link_.socket().handle(), 0, ZMQ_POLLIN, 0}});
  ranks.clear();
  for (int r = 0; r < static_cast<int>(servers_.size()); ++r) {
    if (!Heard(r)) continue;
    items.push_back({servers_[r].handle(), 0, ZMQ_POLLIN, 0});
    ranks.push_back(r);
  }
}

// ZeroMQ's descriptors signal edges: a socket's descriptor becomes readable when something
// arrives after the socket was last found empty, and any operation on the socket may consume
// that signal. So a turn looks at (receives from until empty) the sockets whose descriptor woke
// it and the sockets it sent on (dirty_), and sleeps only when none is dirty. Polling the
// descriptors directly, rather than with zmq::poll (which checks every socket's ZMQ_EVENTS, a
// system call or two each, before and after it sleeps), took the client's system calls per
// 1 MB push from about 47 to 26 (docs/benchmarks.md).
void ClientIo::Turn(int timeout_ms, int extra_fd, std::unique_lock<std::mutex>* unlocked) {
  SendQueued();
  FlushBatches();
  Watched(items_, item_ranks_);
  look_.assign(items_.size(), 0);
  if (timeout_ms > 0 && !AnyDirty()) Sleep(timeout_ms, extra_fd, unlocked);
  // Besides what signalled, every socket sent on since it was last found empty.
  look_[1] = look_[1] || link_dirty_;
  for (size_t i = 2; i < items_.size(); ++i) look_[i] = look_[i] || dirty_[item_ranks_[i - 2]];
  if (link_.MaybeHeartbeat()) look_[1] = link_dirty_ = true;
  if (look_[0]) {
    zmq::message_t m;
    while (wake_in_.recv(m, zmq::recv_flags::dontwait)) {
    }
  }
  SendQueued();
  ReleaseDue();
  for (size_t i = 2; i < items_.size(); ++i) {
    if (look_[i]) DrainServer(item_ranks_[i - 2]);
  }
  ReleaseDue();
  if (look_[1]) DrainScheduler();
  ExpireRecoveries();
  ReleaseLent();
  if (!closed_ && link_.SchedulerLost()) {
    spdlog::error("no word from the scheduler for {} ms; failing every request",
                  link_.view().proto().heartbeat_timeout_ms());
    FailAll(Status::Unavailable("lost the scheduler"));
  }
  FlushBatches();
  settled_.notify_all();  // AwaitServers looks again at what is unanswered
}

// Sleeps on the descriptors of the sockets in items_ (and `extra_fd`), then sets look_ for
// those that signalled. The I/O thread (`unlocked`) sleeps without the gate: what it sleeps on
// is its own, as a caller may run a turn meanwhile (with items_ and fds_).
void ClientIo::Sleep(int timeout_ms, int extra_fd, std::unique_lock<std::mutex>* unlocked) {
  std::vector<pollfd>& fds = unlocked != nullptr ? sleep_fds_ : fds_;
  std::vector<void*>& on = unlocked != nullptr ? slept_on_ : polled_;
  fds.clear();
  on.clear();
  for (const zmq::pollitem_t& i : items_) {
    fds.push_back({zmq::socket_ref(zmq::from_handle, i.socket).get(zmq::sockopt::fd), POLLIN, 0});
    on.push_back(i.socket);
  }
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  if (unlocked != nullptr) {
    sleeping_ = true;
    slept_changed_ = sockets_changed_;
    unlocked->unlock();
  }
  (void)::poll(fds.data(), fds.size(), timeout_ms);
  if (unlocked != nullptr) {
    unlocked->lock();
    sleeping_ = false;
  }
  if (extra_fd >= 0 && (fds.back().revents & POLLIN)) {
    uint64_t count = 0;
    (void)!read(extra_fd, &count, sizeof(count));
  }
  // A caller may have driven while this thread slept: the sockets are looked up again.
  woke_.clear();
  for (size_t i = 0; i < on.size(); ++i) {
    if (fds[i].revents != 0) woke_.push_back(on[i]);
  }
  Watched(items_, item_ranks_);
  look_.assign(items_.size(), 0);
  for (size_t i = 0; i < items_.size(); ++i) {
    look_[i] = std::find(woke_.begin(), woke_.end(), items_[i].socket) != woke_.end();
  }
}

// Receives from server `rank`'s socket until it is empty (no longer dirty).
void ClientIo::DrainServer(int rank) {
  while (true) {
    if (revoking_.contains(rank)) {
      auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
      if (!env) {
        dirty_[rank] = 0;
        return;
      }
      OnRevokingMessage(*env, rank);
      continue;
    }
    if (dead_servers_.contains(rank) || recovering_.contains(rank)) return;
    auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) {
      dirty_[rank] = 0;  // found empty after every send so far
      return;
    }
    if (delayed_) {  // handed over when the emulated link would have delivered it
      delayed_->HoldReply(rank, std::move(*env));
      continue;
    }
    OnReply(*env, rank);
  }
}

void ClientIo::DrainScheduler() {
  while (true) {
    auto env = Receive(link_.socket(), zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) {
      link_dirty_ = false;
      return;
    }
    link_.Heard();
    OnControl(*env);
  }
}

// What a calling thread does before it lets go of the gate: receives from every socket it (or
// a reply it handled) sent on, without the rest of a turn.
void ClientIo::DrainDirty() {
  for (int r = 0; r < static_cast<int>(dirty_.size()); ++r) {
    if (dirty_[r] && Heard(r)) DrainServer(r);
  }
  if (link_dirty_) DrainScheduler();
  ReleaseLent();
  settled_.notify_all();
}

void ClientIo::OnControl(Envelope& env) {
  if (!env.status.ok()) return;
  const proto::Header& h = env.message.header;
  if (link_.SchedulerRestarted(h)) {
    // A restarted scheduler knows this node (its data dir) but not what it was asked (a
    // barrier, a declaration): ask again, under the same request ids.
    for (const auto& [id, p] : pending_) {
      if (p.target == kToScheduler) {
        hetps::Send(link_.socket(), *p.header, {});
        link_dirty_ = true;
      }
    }
  }
  switch (h.type()) {
    case proto::NODE_DEAD: {
      if (h.node() == tier_node_) return TierDown("was declared dead");
      auto server = server_rank_.find(h.node());
      if (server != server_rank_.end()) OnServerDead(server->second);
      return;
    }
    case proto::SERVER_BACK:
      OnServerBack(h);
      return;
    case proto::SHARD_MAP:
      // A new epoch, broadcast; or the answer to this worker's declaration, whose map may be
      // past moves already (it joined late): routes and retired ranks from it either way.
      OnShardMap(h.shard_map());
      if (h.request_id() == 0) return;
      break;
    case proto::HEARTBEAT:
      if (h.has_layer_schedule()) report_.SetLayerSchedule(h.layer_schedule());
      return;
    case proto::SHUTDOWN:
      spdlog::warn("the scheduler shut the cluster down");
      FailAll(Status::Aborted("the cluster was shut down"));
      return;
    default:
      break;
  }
  auto it = pending_.find(h.request_id());
  if (it == pending_.end() || it->second.target != kToScheduler) return;
  OpPtr op = it->second.op;
  pending_.erase(it);
  op->Complete(StatusOf(h), &h);
}

}  // namespace hetps
