// LinkShaper: an emulated edge link between a client and the servers, applied inside the
// client's transport (ClientOptions::link), so no privileges are needed. Each direction is one
// FIFO serializer of `mbps` megabits per second (0: unlimited), followed by a one-way delay of
// `latency_ms` plus a normally distributed jitter of deviation `jitter_ms`, and losses: each
// 1460-byte packet of a message is lost with chance `loss` and sent again (its bytes take the
// link once more), and a message that lost any packet waits one retransmission timeout
// (`rto_ms`, TCP's 200 ms minimum by default). Messages arrive in the order they were sent, as
// on one TCP connection, so a delayed message holds up those behind it. The client holds each
// message until its computed arrival: requests before they go out, replies before they are
// handed over. Seeded; every time is in seconds on the caller's clock.
//
// Thread-safety: none; used by the client's I/O thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "common/status.h"
#include "hetps/link.h"

namespace hetps {

// What LinkShaper refuses: negative figures, a loss of 1 or more.
Status ValidateLinkOptions(const LinkOptions& options);

class LinkShaper {
 public:
  static constexpr size_t kPacketBytes = 1460;
  explicit LinkShaper(const LinkOptions& options);

  // When a message of `bytes` handed to the link at `now` arrives at the other end.
  double Up(size_t bytes, double now) { return Through(up_, bytes, now); }
  double Down(size_t bytes, double now) { return Through(down_, bytes, now); }

 private:
  struct Direction {
    double bits_per_s = 0;
    double free_at = 0;       // the serializer is busy until then
    double last_arrival = 0;  // arrivals keep their order
  };
  double Through(Direction& d, size_t bytes, double now);

  LinkOptions o_;
  Direction up_, down_;
  std::mt19937_64 rng_;
};

}  // namespace hetps
