#include <map>
#include <vector>

#include "server/table/eviction.h"

namespace hetps {
namespace {

// Least frequently used, in O(1) per touch: one recency list per touch count; the victim is
// the least recent row of the lowest count (ties of count go to the least recently touched).
class Lfu final : public EvictionPolicy {
 public:
  void Inserted(uint32_t row) override {
    if (row >= counts_.size()) counts_.resize(std::max<size_t>(row + 1, counts_.size() * 2), 0);
    counts_[row] = 1;
    ListOf(1).PushFront(row);
  }
  void Touched(uint32_t row) override {
    const uint32_t c = counts_[row];
    Leave(row, c);
    const uint32_t next = c == UINT32_MAX ? c : c + 1;  // saturates
    counts_[row] = next;
    ListOf(next).PushFront(row);
  }
  void Erased(uint32_t row) override { Leave(row, counts_[row]); }
  uint32_t Victim() const override {
    return by_count_.empty() ? kNone : by_count_.begin()->second.back();
  }
  int64_t bytes() const override {
    return static_cast<int64_t>(
        (links_.prev.capacity() + links_.next.capacity() + counts_.capacity()) * sizeof(uint32_t));
  }

 private:
  RowList& ListOf(uint32_t count) { return by_count_.try_emplace(count, &links_).first->second; }
  void Leave(uint32_t row, uint32_t count) {
    auto it = by_count_.find(count);
    it->second.Remove(row);
    if (it->second.empty()) by_count_.erase(it);
  }

  RowList::Links links_;
  std::vector<uint32_t> counts_;
  std::map<uint32_t, RowList> by_count_;  // only non-empty lists
};

}  // namespace

void RegisterLfu(EvictionRegistry& r) {
  r.Add({"lfu",
         "least frequently used: drops the row touched fewest times (ties: the least recent)",
         {}},
        {[](const AlgorithmSpec&) { return std::make_unique<Lfu>(); }});
}

}  // namespace hetps
