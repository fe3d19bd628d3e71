// TableShard: the rows of one bucket of a sparse table on its server (docs/tables.md,
// ALGORITHMS.md §10). Rows are created on their first push (or their min_count-th, with
// admission) from the table's initializer, updated row by row by the table's optimizer, and
// dropped by the eviction policy past the shard's row cap or by expiry (ttl). A pull of a key
// without a row returns the initializer's values and stores nothing.
//
// Memory: a row is its dim floats and its optimizer state in chunks of rows, its key (8 bytes),
// its slot in the index (about 4 / load bytes), the policy's bookkeeping (LRU 8 bytes, LFU 12)
// and, with a ttl, its last touch (4 bytes).
//
// Thread-safety: none; one owning thread per shard (server/serving.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "hetps/shard_map.h"
#include "server/optimizer/optimizer.h"
#include "server/table/eviction.h"
#include "server/table/row_init.h"
#include "server/table/row_map.h"

namespace hetps {

namespace proto {
class TableCheckpoint;
}

struct TableStats {
  int64_t hits = 0;      // keys pulled that had a row
  int64_t misses = 0;    // keys pulled that had none (answered with the initializer)
  int64_t created = 0;   // rows created
  int64_t evicted = 0;   // rows dropped for room
  int64_t expired = 0;   // rows dropped by the ttl
  int64_t admitted = 0;  // keys that reached min_count (with admission)
  int64_t dropped = 0;   // row gradients dropped: their key was not admitted yet
  int64_t refused = 0;   // pushes refused: full, and the policy evicts nothing
};

class TableShard {
 public:
  // `max_rows`: this shard's cap (0: none); `ttl`: in the units of the stamps the caller
  // passes (0: none). REQUIRES: `options` validated; `optimizer` outlives the shard.
  TableShard(const std::string& table, const TableOptions& options, int64_t max_rows, uint32_t ttl,
             const Optimizer& optimizer, std::unique_ptr<EvictionPolicy> eviction);
  TableShard(const TableShard&) = delete;
  TableShard& operator=(const TableShard&) = delete;

  int64_t dim() const { return dim_; }
  int64_t rows() const { return index_.size(); }
  const TableStats& stats() const { return stats_; }
  // Every byte the shard holds for its rows (values, state, keys, index, policy, touches).
  int64_t bytes() const;
  // A row's own bytes: its values and its optimizer state.
  int64_t row_bytes() const { return stride_ * static_cast<int64_t>(sizeof(float)); }

  // out[i * dim ...] = key i's row, or its initializer's values when it has none. `now`: the
  // time stamp of this access (seconds or clocks, as the ttl).
  void Pull(const uint64_t* keys, int64_t n, float* out, uint32_t now);
  // Applies scale * g[i * dim ...] to key i's row (keys unique), creating rows as admission
  // and the cap allow. Fails, changing nothing, when it needs more new rows than the cap leaves
  // and the policy drops none.
  Status Push(const uint64_t* keys, int64_t n, const float* g, float scale, uint32_t now);
  // Drops every row untouched for the ttl at `now`; returns how many.
  int64_t Expire(uint32_t now);
  // The row of `key` (dim values, then its optimizer state), or null.
  const float* Find(uint64_t key) const;

  // Export for serving (docs/tables.md): hands `row(key, values)` every row pushed since the
  // last export (full: every row) after `tombstone(key)` for every key dropped since then
  // (evicted or expired; none in a full export), and starts tracking afresh. A delta whose
  // tombstones outgrew the rows (a table that churns without exports) is full instead, and says
  // so by returning true.
  using ExportRow = std::function<void(uint64_t key, const float* values)>;
  using ExportTombstone = std::function<void(uint64_t key)>;
  bool Export(bool full, const ExportRow& row, const ExportTombstone& tombstone);
  // The rows last handed to Export never reached a serving copy: the next export is full.
  void ForceFullExport() { export_full_ = true; }

  // Durability: the rows (values and state, keys, touches), admission counts and figures, and
  // back into an empty shard of the same table (the eviction policy restarts over them).
  void Save(proto::TableCheckpoint& out) const;
  Status Load(const proto::TableCheckpoint& in);

 private:
  float* Row(uint32_t row) const {
    return chunks_[row >> kChunkBits].get() + (row & kChunkMask) * stride_;
  }
  bool Expired(uint32_t row, uint32_t now) const {
    return ttl_ > 0 && now - touches_[row] >= ttl_ && now >= touches_[row];
  }
  // Finds key's row, dropping it first when it expired.
  uint32_t Live(uint64_t key, uint32_t now);
  uint32_t Create(uint64_t key, uint32_t now);  // kNone: full, and nothing may be dropped
  void Drop(uint32_t row);
  void Touch(uint32_t row, uint32_t now);
  // Prefetches what the lookup of keys[i + kAhead] and keys[i + kNear] will read.
  void PrefetchAhead(const uint64_t* keys, int64_t n, int64_t i) const;
  // New rows a push of these keys would create (its admission counted, nothing changed).
  int64_t NewRows(const uint64_t* keys, int64_t n, uint32_t now) const;
  // With admission: whether this push of a key without a row gives it one.
  bool Admit(uint64_t key);

  static constexpr int kChunkBits = 12;
  static constexpr uint32_t kChunkMask = (1u << kChunkBits) - 1;

  const std::string table_;
  const int64_t dim_, stride_;
  const int64_t max_rows_;
  const int64_t min_count_;
  const uint32_t ttl_;
  const Optimizer& optimizer_;
  const std::unique_ptr<EvictionPolicy> eviction_;
  const RowInit init_;
  std::vector<uint64_t> keys_;                    // per row number
  std::vector<uint32_t> touches_;                 // per row number, with a ttl
  std::vector<std::unique_ptr<float[]>> chunks_;  // rows of stride_ floats
  std::vector<uint32_t> free_;                    // row numbers to reuse
  RowMap index_{keys_};
  std::unordered_map<uint64_t, uint32_t> pending_;  // admission: pushes of keys without rows
  // Export: the rows pushed since the last export, the keys dropped since (bounded: past it,
  // the next export is full).
  std::vector<bool> changed_;
  std::vector<uint64_t> tombstones_;
  bool export_full_ = false;
  TableStats stats_;
};

}  // namespace hetps
