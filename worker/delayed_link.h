// DelayedLink: the emulated edge link inside a client's transport (ClientOptions::link). Every
// request waits here until LinkShaper says it would have reached its server, and every reply
// until it would have reached the client; then the client sends it or handles it. Both queues
// are in due order (a shaper's direction is FIFO).
//
// Thread-safety: none; used by whoever drives the client's sockets (ClientIo).
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "common/message.h"
#include "hetps/link.h"
#include "worker/link_shaper.h"

namespace hetps {

class DelayedLink {
 public:
  explicit DelayedLink(const LinkOptions& options) : shaper_(options) {}

  // A request for server `rank`, sent when it would have arrived.
  void HoldRequest(int rank, const proto::Header& header, std::vector<zmq::message_t> payload);
  // A reply from server `rank`, handed over when it would have arrived.
  void HoldReply(int rank, Envelope reply);
  // Calls `send` for each request and `deliver` for each reply whose time has come, in order.
  void ReleaseDue(
      const std::function<void(int rank, const proto::Header&, std::vector<zmq::message_t>)>& send,
      const std::function<void(int rank, Envelope&)>& deliver);
  // Milliseconds until the first held message is due (0 when one is), at most `cap_ms`.
  int TimeoutMs(int cap_ms) const;
  // Drops everything held, releasing the caller's buffers in held requests.
  void Clear();

 private:
  struct Held {
    double due = 0;
    int rank = 0;
    proto::Header header;                 // a request
    std::vector<zmq::message_t> payload;  // a request
    std::optional<Envelope> reply;        // a reply
  };
  static double Now();

  LinkShaper shaper_;
  std::deque<Held> outbound_, inbound_;
};

}  // namespace hetps
