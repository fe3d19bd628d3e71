// JoinLimiter: how fast the scheduler admits new registrations from one peer address. Every
// registration it admits is a member it keeps (a dead worker may come back under its rank) and
// announces, so a peer that registers on new connection after new connection would otherwise
// grow the scheduler without bound. A token bucket per address: `burst` registrations at once,
// then `rate` per second.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

namespace hetps {

class JoinLimiter {
 public:
  // `rate` <= 0: no limit. `max_addresses` bounds the buckets kept: beyond it the full ones
  // (addresses quiet for a while) are dropped, and if none is, all are.
  JoinLimiter(double rate, double burst, size_t max_addresses = 4096);

  // Seconds from `now` until a registration from `address` may go ahead (0: now).
  double Wait(const std::string& address, double now) const;
  // A registration from `address` was admitted at `now` (seconds): takes its token. Only
  // admissions count, so a registration refused for another reason and retried costs nothing.
  void Take(const std::string& address, double now);
  size_t addresses() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    double at;  // when `tokens` was last brought up to date
  };
  double Tokens(const Bucket& b, double now) const;

  double rate_, burst_;
  size_t max_addresses_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace hetps
