#include "aggregator/slot_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace hetps {

StatusOr<SlotPool> SlotPool::Make(int slots, int chunk, int group) {
  if (slots < 1 || chunk < 1 || group < 1 || group > 64) {
    return Status::InvalidArgument(fmt::format(
        "a slot pool needs slots >= 1, chunk >= 1 and a group of 1..64 (got {}, {}, {})", slots,
        chunk, group));
  }
  SlotPool p;
  p.chunk_ = chunk;
  p.group_ = group;
  p.slots_.resize(static_cast<size_t>(slots));
  for (Slot& s : p.slots_) {
    s.sum.assign(static_cast<size_t>(chunk), 0);
    s.last.assign(static_cast<size_t>(chunk), 0);
  }
  return p;
}

StatusOr<SlotPool::Result> SlotPool::Add(const Key& key, int member,
                                         std::span<const uint32_t> words) {
  if (member < 0 || member >= group_) {
    return Status::InvalidArgument(
        fmt::format("contributor {} is not in the group of {}", member, group_));
  }
  if (words.empty() || words.size() > static_cast<size_t>(chunk_) || key.chunk < 0) {
    return Status::SizeMismatch(fmt::format("a chunk of {} words (index {}); the pool's hold 1..{}",
                                            words.size(), key.chunk, chunk_));
  }
  Slot& s = slots_[static_cast<size_t>(key.chunk % static_cast<int64_t>(slots_.size()))];
  if (s.done && s.done_key == key) {
    return Result{Outcome::kResent, std::span<const uint32_t>(s.last.data(), s.done_size)};
  }
  if (!s.busy) {
    s.busy = true;
    s.key = key;
    s.members = 0;
    s.size = words.size();
    std::fill(s.sum.begin(), s.sum.end(), 0u);
  } else if (!(s.key == key)) {
    return Result{Outcome::kFull, {}};
  }
  if (words.size() != s.size) {
    return Status::SizeMismatch(
        fmt::format("contributor {} sent {} words of chunk {}, the others {}", member, words.size(),
                    key.chunk, s.size));
  }
  const uint64_t bit = uint64_t{1} << member;
  if ((s.members & bit) != 0) return Result{Outcome::kDuplicate, {}};
  s.members |= bit;
  for (size_t i = 0; i < s.size; ++i) s.sum[i] += words[i];  // modulo 2^32, exact
  if (std::popcount(s.members) < group_) return Result{Outcome::kHeld, {}};
  std::swap(s.sum, s.last);
  s.done = true;
  s.done_key = key;
  s.done_size = s.size;
  s.busy = false;
  ++completed_;
  return Result{Outcome::kComplete, std::span<const uint32_t>(s.last.data(), s.size)};
}

void SlotPool::Drop(int32_t partition, int64_t clock) {
  for (Slot& s : slots_) {
    if (s.busy && s.key.partition == partition && s.key.clock == clock) s.busy = false;
  }
}

int SlotPool::busy() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }));
}

size_t SlotPool::bytes() const {
  size_t n = 0;
  for (const Slot& s : slots_) n += (s.sum.capacity() + s.last.capacity()) * sizeof(uint32_t);
  return n;
}

}  // namespace hetps
