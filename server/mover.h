// Mover: a source server's side of live re-sharding (docs/resharding.md). The owning thread of
// each partition being moved hands its whole state over (Ship, from any thread); the network
// thread sends each to its target server (Pump: one connection per target node, dialled with
// this server's identity and key) and counts the targets' acknowledgements. A target that
// answers with an error, or a connection that cannot be made, fails the move.
//
// Thread-safety: Ship from any thread; everything else on the network thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/auth.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

class Mover {
 public:
  // `self`: this server's node id; `auth` (may be null; outlives this): with CURVE, each target
  // is dialled expecting its announced key.
  Mover(zmq::context_t& context, int32_t self, const Auth* auth);
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Dials `target` (before any Ship to it).
  Status Connect(const proto::NodeInfo& target);
  // Partition `partition`'s serialized PartitionCheckpoint for target node `to`. Any thread.
  void Ship(int32_t to, int32_t partition, std::vector<uint8_t> state);
  // Sends what was shipped and reads what the targets answered; the first error, sticky.
  Status Pump();
  // The targets' sockets, for the network thread's poll.
  void AddPollItems(std::vector<zmq::pollitem_t>& items);
  int64_t acknowledged() const { return acknowledged_; }
  int64_t bytes_sent() const { return bytes_; }

 private:
  struct Item {
    int32_t to;
    int32_t partition;
    std::vector<uint8_t> state;  // sent as it is (no copy)
  };
  zmq::context_t& context_;
  const int32_t self_;
  const Auth* auth_;
  std::mutex mu_;
  std::deque<Item> inbox_;                                // guarded by mu_
  std::map<int32_t, zmq::socket_t> sockets_;              // by target node id
  std::set<std::pair<int32_t, int32_t>> unacknowledged_;  // (target, partition)
  uint64_t next_request_ = 1;
  int64_t acknowledged_ = 0;
  int64_t bytes_ = 0;
  Status error_;
};

}  // namespace hetps
