// Dial: the DEALER socket a registered node uses to reach another node's ROUTER (a worker to a
// server or its aggregator, an aggregator to a server): its routing identity is the node's
// (the receiver checks a request's sender against it), unbounded queues (flow control is the
// sender's own), no linger, and with auth.curve it talks only to the holder of `peer_key`.
#pragma once

#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "common/auth.h"
#include "common/status.h"

namespace hetps {

// Fails with the reason when the key is unusable or the address malformed.
StatusOr<zmq::socket_t> Dial(zmq::context_t& context, int32_t self, const std::string& address,
                             const Auth& auth, const std::string& peer_key);

}  // namespace hetps
