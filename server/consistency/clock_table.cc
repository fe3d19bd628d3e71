#include "server/consistency/clock_table.h"

#include <algorithm>
#include <limits>

namespace hetps {

ClockTable::ClockTable(const std::vector<int32_t>& workers) {
  for (int32_t w : workers) clocks_[w] = 0;
}

void ClockTable::Advance(int32_t w, int64_t completed) {
  auto it = clocks_.find(w);
  if (it == clocks_.end()) return;
  it->second = std::max(it->second, completed + 1);
  reached_ = std::max(reached_, it->second);
}

void ClockTable::Add(int32_t w, int64_t clock) {
  clocks_.emplace(w, clock);
  reached_ = std::max(reached_, clocks_.at(w));
}

void ClockTable::Remove(int32_t w) { clocks_.erase(w); }

int64_t ClockTable::JoinClock() const { return clocks_.empty() ? reached_ : min(); }

int64_t ClockTable::clock(int32_t w) const {
  auto it = clocks_.find(w);
  return it == clocks_.end() ? 0 : it->second;
}

int64_t ClockTable::min() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (const auto& [w, c] : clocks_) m = std::min(m, c);
  return m;
}

int64_t ClockTable::max() const {
  int64_t m = 0;
  for (const auto& [w, c] : clocks_) m = std::max(m, c);
  return m;
}

int32_t ClockTable::slowest() const {
  int32_t best = -1;
  for (const auto& [w, c] : clocks_) {
    if (best < 0 || c < clocks_.at(best)) best = w;
  }
  return best;
}

}  // namespace hetps
