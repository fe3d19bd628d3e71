// Message: one protobuf Header (frame 0) plus raw payload frames, and the send/receive
// functions every role uses. Payload frames are zmq messages, so a sender may hand over its
// own memory without a copy (a zmq::message_t over its buffer, with a release callback) and a
// receiver reads tensors in place.
//
// Thread-safety: none here; a zmq socket belongs to one thread (DESIGN.md, Wire).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

struct Message {
  proto::Header header;
  std::vector<zmq::message_t> payload;
};

// One received multipart message. `status` is Malformed when frame 0 was not a Header; the
// identity is kept even then, so the receiver can still answer the peer with an error.
struct Envelope {
  std::string identity;  // the peer's routing identity (ROUTER sockets only)
  // The public key (Z85) the peer authenticated with on a CURVE socket (common/auth.h: the ZAP
  // handler's user id); empty on a plain socket.
  std::string peer;
  // The peer's IP address (ZeroMQ's Peer-Address), read for REGISTER messages only: the
  // scheduler limits registrations per address. Empty otherwise, and on ipc or inproc.
  std::string address;
  Message message;
  Status status;
};

// Receives one multipart message; on a ROUTER socket pass `routed` so frame 0 is read as the
// identity. Returns nullopt when nothing is ready (dontwait). Every frame is always drained.
std::optional<Envelope> Receive(zmq::socket_t& socket, zmq::recv_flags flags, bool routed);

// Sends header + payload frames (moved out of `payload`). Returns false if the socket refused
// (e.g. ROUTER with an unroutable identity); never blocks when `dontwait`.
bool Send(zmq::socket_t& socket, const proto::Header& header,
          std::vector<zmq::message_t> payload = {}, bool dontwait = false);
bool SendRouted(zmq::socket_t& socket, const std::string& identity, const proto::Header& header,
                std::vector<zmq::message_t> payload = {});

// A payload frame that takes over `bytes` without copying them (freed once ZeroMQ sent it).
zmq::message_t OwnedFrame(std::vector<uint8_t> bytes);
// A payload frame of shared `bytes`, kept alive until ZeroMQ sent it (no copy; the caller may
// keep them to send again).
zmq::message_t SharedFrame(std::shared_ptr<const std::vector<uint8_t>> bytes);

// A reply header for `request`: same request id and partition, sender = `self`, and the
// request's virtual time when it has one.
proto::Header ReplyTo(const proto::Header& request, proto::MsgType type, int32_t self);
// An ERROR reply header for `request` carrying `status`.
proto::Header ErrorReply(const proto::Header& request, const Status& status, int32_t self);
// The Status an ERROR header carries (OK for any other type).
Status StatusOf(const proto::Header& header);

// Routing identity of node `id`, set on every DEALER after registration so a ROUTER can check
// that a header's sender matches the connection it came from.
std::string NodeIdentity(int32_t id);
// identity == NodeIdentity(id), without building the string (checked on every request).
bool IsNodeIdentity(const std::string& identity, int32_t id);

// The endpoint a socket actually bound (resolves "tcp://127.0.0.1:*" to a port).
std::string BoundEndpoint(zmq::socket_t& socket);

}  // namespace hetps
