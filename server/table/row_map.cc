#include "server/table/row_map.h"

#include <malloc.h>

namespace hetps {

RowMap::RowMap(const std::vector<uint64_t>& keys) : keys_(keys) { Clear(); }

void RowMap::Clear() {
  slots_.assign(16, kNone);
  mask_ = slots_.size() - 1;
  shift_ = 60;
  size_ = 0;
}

size_t RowMap::Home(uint64_t key) const {
  // Fibonacci hashing: the top bits of a multiplicative mix (ids are often consecutive).
  return static_cast<size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift_);
}

uint32_t RowMap::Find(uint64_t key) const {
  for (size_t i = Home(key);; i = (i + 1) & mask_) {
    const uint32_t row = slots_[i];
    if (row == kNone) return kNone;
    if (keys_[row] == key) return row;
  }
}

void RowMap::Insert(uint64_t key, uint32_t row) {
  if (static_cast<size_t>(size_ + 1) * 10 > slots_.size() * 7) Grow();
  size_t i = Home(key);
  while (slots_[i] != kNone) i = (i + 1) & mask_;
  slots_[i] = row;
  ++size_;
}

void RowMap::Erase(uint64_t key) {
  size_t i = Home(key);
  while (keys_[slots_[i]] != key) i = (i + 1) & mask_;
  // Backward shift: move each later entry of the run into the hole when its home allows.
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    const uint32_t row = slots_[j];
    if (row == kNone) break;
    const size_t home = Home(keys_[row]);
    // The entry may fill the hole at i when its home is not cyclically within (i, j].
    if (((j - home) & mask_) >= ((j - i) & mask_)) {
      slots_[i] = row;
      i = j;
    }
  }
  slots_[i] = kNone;
  --size_;
}

void RowMap::Grow() {
  std::vector<uint32_t> old = std::move(slots_);
  slots_.assign(old.size() * 2, kNone);
  mask_ = slots_.size() - 1;
  --shift_;
  for (uint32_t row : old) {
    if (row == kNone) continue;
    size_t i = Home(keys_[row]);
    while (slots_[i] != kNone) i = (i + 1) & mask_;
    slots_[i] = row;
  }
  // The server keeps freed memory for transfers (common/allocator.h); a large old index is
  // handed back, or it would stay resident beside the new one.
  if (old.size() * sizeof(uint32_t) >= (size_t{1} << 20)) {
    std::vector<uint32_t>().swap(old);
    malloc_trim(0);
  }
}

}  // namespace hetps
