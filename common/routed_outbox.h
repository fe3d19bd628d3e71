// Messages from a ROUTER socket to peers that cannot take them yet. A ROUTER drops a message
// to an identity with no connection, and one whose send queue is full, without a word; a
// scheduler restarted on its data dir sends to nodes whose DEALERs have not reconnected yet
// (a SERVER_BACK, a shard map, a barrier release), so those messages were lost. The outbox
// holds them instead and sends them, in order with every later message to the same peer, once
// the peer can take them.
//
// Thread-safety: none; it uses the socket, which belongs to one thread.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <zmq.hpp>

#include "hetps.pb.h"

namespace hetps {

class RoutedOutbox {
 public:
  // Sets ZMQ_ROUTER_MANDATORY and a send timeout of 0 on `router`, so a send it cannot make
  // fails at once instead of being dropped or blocking. At most `max_held` messages are held
  // per peer; beyond that the oldest is dropped (with a warning).
  // REQUIRES: `router` is a ROUTER socket and outlives the outbox.
  explicit RoutedOutbox(zmq::socket_t& router, size_t max_held = 4096);
  RoutedOutbox(const RoutedOutbox&) = delete;
  RoutedOutbox& operator=(const RoutedOutbox&) = delete;

  enum class Outcome { kSent, kHeld, kDropped };
  // Sends `h` to `identity` now if nothing to that peer is held and the peer can take it;
  // otherwise holds it when `hold()` says so (a peer expected back: a live node) or drops it.
  // `hold` is asked only then, so a lookup behind it costs nothing on the common path.
  Outcome Send(const std::string& identity, const proto::Header& h,
               const std::function<bool()>& hold);
  // Sends what is held, oldest first per peer, as far as each peer takes it. Returns how many
  // went out. Cheap when nothing is held.
  size_t Flush();
  // Drops what is held for `identity` (the peer is gone for good).
  void Forget(const std::string& identity);
  size_t held() const { return held_count_; }
  size_t held_for(const std::string& identity) const;

 private:
  zmq::socket_t& router_;
  const size_t max_held_;
  std::map<std::string, std::deque<proto::Header>> held_;
  size_t held_count_ = 0;
};

}  // namespace hetps
