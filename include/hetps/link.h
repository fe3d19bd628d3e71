// LinkOptions: an emulated edge link between a client and the servers (ClientOptions::link).
// Each direction is one FIFO serializer of `mbps` megabits per second (0: unlimited), followed by
// a one-way delay of `latency_ms` plus a normally distributed jitter of deviation `jitter_ms`,
// and losses: each 1460-byte packet of a message is lost with chance `loss` and sent again, and
// a message that lost any packet waits one retransmission timeout (`rto_ms`). Seeded.
//
// Part of hetps's public API (installed as <hetps/link.h>).
#pragma once

#include <cstdint>

namespace hetps {

struct LinkOptions {
  double up_mbps = 0;     // client -> servers (0: unlimited)
  double down_mbps = 0;   // servers -> client (0: unlimited)
  double latency_ms = 0;  // one way, each direction
  double jitter_ms = 0;
  double loss = 0;  // per packet
  double rto_ms = 200;
  uint64_t seed = 1;
  // The link is emulated outside the client (hetps launch --links=netns: tc and a delaying
  // proxy): the client reports it but does not shape its own transport.
  bool outside = false;

  bool enabled() const {
    return up_mbps > 0 || down_mbps > 0 || latency_ms > 0 || jitter_ms > 0 || loss > 0;
  }
};

}  // namespace hetps
