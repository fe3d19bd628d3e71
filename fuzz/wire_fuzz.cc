// The wire on hostile frames: the input is cut into frames (each a 2-byte length, then its
// bytes) and sent to a ROUTER socket, which reads it as every node does (common/message.h):
// frame 0 must parse as a hetps header, the rest are payload frames. A malformed message is
// reported as such and every frame is drained, so the next message reads cleanly. A BATCH
// (common/batch.h) is split as servers and workers do: either every frame lands in exactly one
// part, or the batch is refused whole.
#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/batch.h"
#include "common/message.h"

namespace {

struct Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  Sockets() {
    router.bind("inproc://wire-fuzz");
    dealer.set(zmq::sockopt::routing_id, std::string("node-1"));
    dealer.connect("inproc://wire-fuzz");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hetps;
  static Sockets* s = new Sockets();
  std::vector<std::string> frames;
  while (size >= 2 && frames.size() < 16) {
    const size_t n = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
    frames.emplace_back(reinterpret_cast<const char*>(data + 2), n);
    data += 2 + n;
    size -= 2 + n;
  }
  if (frames.empty()) return 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    s->dealer.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  // A well-formed message after it: it must arrive intact, whatever came before.
  proto::Header ok;
  ok.set_type(proto::HEARTBEAT);
  ok.set_request_id(42);
  Send(s->dealer, ok);
  auto hostile = Receive(s->router, zmq::recv_flags::none, /*routed=*/true);
  if (!hostile || hostile->identity != "node-1") __builtin_trap();
  if (hostile->status.ok()) {
    (void)StatusOf(hostile->message.header);
    (void)hostile->message.header.DebugString();
  }
  if (IsBatch(*hostile)) {
    const size_t frames = hostile->message.payload.size();
    std::vector<Envelope> parts;
    if (Unbatch(*hostile, parts).ok()) {
      size_t got = 0;
      for (const Envelope& part : parts) {
        if (part.identity != "node-1" || part.message.header.type() == proto::BATCH) {
          __builtin_trap();
        }
        got += part.message.payload.size();
      }
      if (parts.empty() || got != frames) __builtin_trap();
    } else if (!parts.empty()) {
      __builtin_trap();
    }
  }
  auto next = Receive(s->router, zmq::recv_flags::none, /*routed=*/true);
  if (!next || !next->status.ok() || next->message.header.request_id() != 42) __builtin_trap();
  return 0;
}
