// ClockTable: the completed clocks of the live workers, as one server sees them. A worker's
// clock is the number of clocks it has finished (0 at start); the slowest live worker's clock
// bounds what reads may see (ALGORITHMS.md §1).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace hetps {

class ClockTable {
 public:
  ClockTable() = default;
  explicit ClockTable(const std::vector<int32_t>& workers);

  // Worker `w` finished clock `completed`: its clock becomes completed + 1 (never goes back).
  // Unknown workers are ignored (a dead worker's late message).
  void Advance(int32_t w, int64_t completed);
  // A worker that joined the running cluster, at `clock` (no-op if it is already there).
  void Add(int32_t w, int64_t clock);
  void Remove(int32_t w);
  // Where a worker joining now starts: the slowest live worker's clock (it holds back no one
  // more than the slowest already does), or, with no live worker, the furthest clock any
  // worker reached (nothing is left to wait for below it).
  int64_t JoinClock() const;
  bool contains(int32_t w) const { return clocks_.contains(w); }
  int64_t clock(int32_t w) const;
  // Slowest / fastest live worker; with no live worker min() is INT64_MAX (nothing to wait for).
  int64_t min() const;
  int64_t max() const;
  // The live worker with the lowest clock (lowest id on ties); -1 if none.
  int32_t slowest() const;
  const std::map<int32_t, int64_t>& all() const { return clocks_; }

 private:
  std::map<int32_t, int64_t> clocks_;
  int64_t reached_ = 0;  // the furthest clock a worker reached, the removed ones included
};

}  // namespace hetps
