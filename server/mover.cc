#include "server/mover.h"

#include <fmt/format.h>

#include "common/message.h"

namespace hetps {

Mover::Mover(zmq::context_t& context, int32_t self, const Auth* auth)
    : context_(context), self_(self), auth_(auth) {}

Status Mover::Connect(const proto::NodeInfo& target) {
  if (sockets_.contains(target.id())) return Status();
  zmq::socket_t socket(context_, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::routing_id, NodeIdentity(self_));  // the target checks it
  if (auth_ != nullptr) {
    if (Status s = auth_->SecureClient(socket, target.public_key()); !s.ok()) return s;
  }
  try {
    socket.connect(target.address());
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(fmt::format("cannot dial server node {} at {}: {}", target.id(),
                                           target.address(), e.what()));
  }
  sockets_.emplace(target.id(), std::move(socket));
  return Status();
}

void Mover::Ship(int32_t to, int32_t partition, std::vector<uint8_t> state) {
  std::lock_guard<std::mutex> lock(mu_);
  inbox_.push_back({to, partition, std::move(state)});
}

void Mover::AddPollItems(std::vector<zmq::pollitem_t>& items) {
  for (auto& [id, socket] : sockets_) items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
}

Status Mover::Pump() {
  std::deque<Item> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(inbox_);
  }
  for (Item& item : out) {
    auto socket = sockets_.find(item.to);
    if (socket == sockets_.end()) {
      if (error_.ok()) error_ = Status::Internal(fmt::format("no connection to node {}", item.to));
      continue;
    }
    proto::Header h;
    h.set_type(proto::MOVE_STATE);
    h.set_sender(self_);
    h.set_request_id(next_request_++);
    h.set_partition(item.partition);
    bytes_ += static_cast<int64_t>(item.state.size());
    std::vector<zmq::message_t> payload;
    payload.push_back(OwnedFrame(std::move(item.state)));
    hetps::Send(socket->second, h, std::move(payload));
    unacknowledged_.insert({item.to, item.partition});
  }
  for (auto& [id, socket] : sockets_) {
    while (auto env = Receive(socket, zmq::recv_flags::dontwait, /*routed=*/false)) {
      const proto::Header& h = env->message.header;
      if (!env->status.ok() && error_.ok()) error_ = env->status;
      if (!env->status.ok()) continue;
      if (!unacknowledged_.erase({id, h.partition()})) continue;  // not one it sent
      if (h.type() == proto::MOVE_STATE) {
        ++acknowledged_;
      } else if (error_.ok()) {
        error_ = Status(StatusOf(h).code(), fmt::format("server node {} refused partition {}: {}",
                                                        id, h.partition(), StatusOf(h).message()));
      }
    }
  }
  return error_;
}

}  // namespace hetps
