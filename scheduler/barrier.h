// Barrier: a rendezvous of the live workers. Each arrival is held until every worker that is
// still alive has arrived; a worker that dies or leaves stops counting, so nobody waits on it.
// The same mechanism gates the collective tensor declaration.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hetps {

struct Arrival {
  int32_t worker = 0;
  uint64_t request_id = 0;
  std::string identity;
};

class Barrier {
 public:
  // Records `worker`'s arrival (a repeated arrival replaces the earlier one).
  void Arrive(Arrival arrival);
  // Forgets a dead or departed worker's arrival.
  void Remove(int32_t worker);
  // When every id in `live` has arrived (and at least one has), returns all arrivals and starts
  // the next generation; otherwise returns nothing.
  std::vector<Arrival> TryRelease(const std::vector<int32_t>& live);
  size_t waiting() const { return arrived_.size(); }
  uint64_t generation() const { return generation_; }

 private:
  std::map<int32_t, Arrival> arrived_;
  uint64_t generation_ = 0;
};

}  // namespace hetps
