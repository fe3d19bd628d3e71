#include "common/message.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>

namespace hetps {
namespace {

// Reads the header in `first` and the payload frames that follow it.
void ReadBody(zmq::socket_t& socket, zmq::message_t& first, Envelope& env) {
  if (const char* user = zmq_msg_gets(first.handle(), "User-Id"); user != nullptr) env.peer = user;
  bool parsed = env.message.header.ParseFromArray(first.data(), static_cast<int>(first.size()));
  bool more = first.more();
  while (more) {
    zmq::message_t frame;
    (void)socket.recv(frame, zmq::recv_flags::none);
    more = frame.more();
    env.message.payload.push_back(std::move(frame));
  }
  if (parsed && env.message.header.type() == proto::REGISTER) {
    if (const char* a = zmq_msg_gets(first.handle(), "Peer-Address"); a != nullptr) env.address = a;
  }
  if (!parsed || env.message.header.type() == proto::MSG_UNKNOWN) {
    env.status =
        Status::Malformed(fmt::format("frame 0 ({} bytes) is not a hetps header", first.size()));
  }
}

}  // namespace

std::optional<Envelope> Receive(zmq::socket_t& socket, zmq::recv_flags flags, bool routed) {
  zmq::message_t first;
  if (!socket.recv(first, flags)) return std::nullopt;
  Envelope env;
  if (routed) {
    env.identity = first.to_string();
    if (!first.more()) {
      env.status = Status::Malformed("message has no header frame");
      return env;
    }
    (void)socket.recv(first, zmq::recv_flags::none);
  }
  ReadBody(socket, first, env);
  return env;
}

bool Send(zmq::socket_t& socket, const proto::Header& header, std::vector<zmq::message_t> payload,
          bool dontwait) {
  std::string bytes = header.SerializeAsString();
  auto more =
      dontwait ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::sndmore;
  auto last = dontwait ? zmq::send_flags::dontwait : zmq::send_flags::none;
  if (!socket.send(zmq::buffer(bytes), payload.empty() ? last : more)) return false;
  for (size_t i = 0; i < payload.size(); ++i) {
    (void)socket.send(payload[i], i + 1 == payload.size() ? last : more);
  }
  return true;
}

bool SendRouted(zmq::socket_t& socket, const std::string& identity, const proto::Header& header,
                std::vector<zmq::message_t> payload) {
  try {
    if (!socket.send(zmq::buffer(identity), zmq::send_flags::sndmore)) return false;
    return Send(socket, header, std::move(payload));
  } catch (const zmq::error_t&) {
    return false;  // EHOSTUNREACH with ZMQ_ROUTER_MANDATORY: the peer is gone
  }
}

zmq::message_t OwnedFrame(std::vector<uint8_t> bytes) {
  auto* held = new std::vector<uint8_t>(std::move(bytes));
  return zmq::message_t(
      held->data(), held->size(),
      [](void*, void* hint) { delete static_cast<std::vector<uint8_t>*>(hint); }, held);
}

zmq::message_t SharedFrame(std::shared_ptr<const std::vector<uint8_t>> bytes) {
  auto* held = new std::shared_ptr<const std::vector<uint8_t>>(std::move(bytes));
  return zmq::message_t(
      const_cast<uint8_t*>((*held)->data()), (*held)->size(),
      [](void*, void* hint) {
        delete static_cast<std::shared_ptr<const std::vector<uint8_t>>*>(hint);
      },
      held);
}

proto::Header ReplyTo(const proto::Header& request, proto::MsgType type, int32_t self) {
  proto::Header h;
  h.set_type(type);
  h.set_sender(self);
  h.set_request_id(request.request_id());
  h.set_partition(request.partition());
  if (request.has_virtual_time()) h.set_virtual_time(request.virtual_time());
  return h;
}

proto::Header ErrorReply(const proto::Header& request, const Status& status, int32_t self) {
  proto::Header h = ReplyTo(request, proto::ERROR, self);
  h.set_error(ToWire(status.code()));
  h.set_error_message(status.message());
  return h;
}

Status StatusOf(const proto::Header& header) {
  if (header.type() != proto::ERROR) return Status();
  StatusCode code =
      header.error() == StatusCode::kOk ? StatusCode::kInternal : FromWire(header.error());
  return Status(code, header.error_message());
}

std::string NodeIdentity(int32_t id) { return fmt::format("node-{}", id); }

bool IsNodeIdentity(const std::string& identity, int32_t id) {
  constexpr std::string_view kPrefix = "node-";
  if (identity.size() <= kPrefix.size() || identity.compare(0, kPrefix.size(), kPrefix) != 0) {
    return false;
  }
  char digits[16];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), id);
  return ec == std::errc() && std::string_view(identity).substr(kPrefix.size()) ==
                                  std::string_view(digits, end - digits);
}

std::string BoundEndpoint(zmq::socket_t& socket) { return socket.get(zmq::sockopt::last_endpoint); }

}  // namespace hetps
