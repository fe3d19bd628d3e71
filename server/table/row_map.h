// RowMap: a table shard's index from uint64 key to row number, open addressing with linear
// probing. A slot holds only the row number (4 bytes); the key it stands for is read from the
// shard's own array of row keys, so the index costs about 4 / load bytes per row (load kept in
// (0.3, 0.7]). Erasing shifts the probe run back (no tombstones), so lookups never slow down
// with churn (eviction, expiry).
//
// Thread-safety: none; the shard's owning thread uses it.
#pragma once

#include <cstdint>
#include <vector>

namespace hetps {

class RowMap {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  // `keys[row]`: the key row `row` holds (the shard's array, which outlives the map).
  explicit RowMap(const std::vector<uint64_t>& keys);

  // The row of `key`, or kNone.
  uint32_t Find(uint64_t key) const;
  // Lookups of a batch of keys: Prefetch the slot of a key some lookups ahead, and Likely (the
  // row in its home slot, or kNone; a load, no check) for one a few lookups ahead, to prefetch
  // that row's key and values, so that Find finds them in the cache.
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[Home(key)]); }
  uint32_t Likely(uint64_t key) const { return slots_[Home(key)]; }
  // Indexes `row` under `key`. REQUIRES: key_of(row) == key, and `key` is not indexed yet.
  void Insert(uint64_t key, uint32_t row);
  // Drops `key`'s entry. REQUIRES: it is indexed.
  void Erase(uint64_t key);
  void Clear();

  int64_t size() const { return size_; }
  int64_t bytes() const { return static_cast<int64_t>(slots_.size() * sizeof(uint32_t)); }

 private:
  size_t Home(uint64_t key) const;
  void Grow();

  const std::vector<uint64_t>& keys_;
  std::vector<uint32_t> slots_;
  size_t mask_ = 0;
  int shift_ = 60;
  int64_t size_ = 0;
};

}  // namespace hetps
