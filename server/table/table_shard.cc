#include "server/table/table_shard.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <cstring>

#include "durable.pb.h"

namespace hetps {
namespace {

// Keys waiting for admission that a shard counts at most; past it the counts start over (a
// stream of one-off ids must not grow the server without bound).
int64_t PendingLimit(int64_t max_rows) { return std::max<int64_t>(int64_t{1} << 20, 4 * max_rows); }

}  // namespace

TableShard::TableShard(const std::string& table, const TableOptions& o, int64_t max_rows,
                       uint32_t ttl, const Optimizer& optimizer,
                       std::unique_ptr<EvictionPolicy> eviction)
    : table_(table),
      dim_(o.dim),
      stride_(o.dim + optimizer.RowStateFloats(o.dim)),
      max_rows_(max_rows),
      min_count_(o.min_count),
      ttl_(ttl),
      optimizer_(optimizer),
      eviction_(std::move(eviction)),
      init_(table, o) {}

int64_t TableShard::bytes() const {
  const int64_t chunk = (int64_t{1} << kChunkBits) * row_bytes();
  return static_cast<int64_t>(chunks_.size()) * chunk +
         static_cast<int64_t>(keys_.capacity() * sizeof(uint64_t) +
                              touches_.capacity() * sizeof(uint32_t) +
                              free_.capacity() * sizeof(uint32_t)) +
         index_.bytes() + eviction_->bytes() +
         static_cast<int64_t>(pending_.size()) * 32;  // a node of the admission counts, about
}

const float* TableShard::Find(uint64_t key) const {
  const uint32_t row = index_.Find(key);
  return row == RowMap::kNone ? nullptr : Row(row);
}

void TableShard::Touch(uint32_t row, uint32_t now) {
  if (ttl_ > 0) touches_[row] = now;
  eviction_->Touched(row);
}

uint32_t TableShard::Live(uint64_t key, uint32_t now) {
  const uint32_t row = index_.Find(key);
  if (row == RowMap::kNone || !Expired(row, now)) return row;
  Drop(row);
  ++stats_.expired;
  return RowMap::kNone;
}

void TableShard::Drop(uint32_t row) {
  eviction_->Erased(row);
  index_.Erase(keys_[row]);
  free_.push_back(row);
  changed_[row] = false;
  if (export_full_) return;
  tombstones_.push_back(keys_[row]);
  // A serving copy that misses this many drops is better sent the whole table.
  if (static_cast<int64_t>(tombstones_.size()) > std::max<int64_t>(4096, 2 * rows())) {
    std::vector<uint64_t>().swap(tombstones_);
    export_full_ = true;
  }
}

uint32_t TableShard::Create(uint64_t key, uint32_t now) {
  if (max_rows_ > 0 && rows() >= max_rows_) {
    const uint32_t victim = eviction_->Victim();
    if (victim == EvictionPolicy::kNone) return RowMap::kNone;
    Drop(victim);
    ++stats_.evicted;
  }
  uint32_t row;
  if (!free_.empty()) {
    row = free_.back();
    free_.pop_back();
  } else {
    row = static_cast<uint32_t>(keys_.size());
    const size_t capacity = keys_.capacity();
    keys_.push_back(0);
    changed_.push_back(false);
    if (ttl_ > 0) touches_.push_back(0);
    // Grown: hand the old arrays back (the server's allocator keeps freed memory otherwise).
    if (keys_.capacity() != capacity && capacity * sizeof(uint64_t) >= (size_t{1} << 20)) {
      malloc_trim(0);
    }
    if ((row >> kChunkBits) >= chunks_.size()) {
      chunks_.push_back(std::make_unique<float[]>((size_t{1} << kChunkBits) * stride_));
    }
  }
  keys_[row] = key;
  if (ttl_ > 0) touches_[row] = now;
  float* values = Row(row);
  init_.Fill(key, values);
  std::fill(values + dim_, values + stride_, 0.0f);
  index_.Insert(key, row);
  eviction_->Inserted(row);
  ++stats_.created;
  return row;
}

bool TableShard::Admit(uint64_t key) {
  if (min_count_ <= 1) return true;
  if (static_cast<int64_t>(pending_.size()) >= PendingLimit(max_rows_)) pending_.clear();
  auto [it, fresh] = pending_.try_emplace(key, 0);
  if (++it->second < min_count_) return false;
  pending_.erase(it);
  ++stats_.admitted;
  return true;
}

int64_t TableShard::NewRows(const uint64_t* keys, int64_t n, uint32_t now) const {
  int64_t fresh = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t row = index_.Find(keys[i]);
    if (row != RowMap::kNone && !Expired(row, now)) continue;
    if (row != RowMap::kNone) {  // expires now: its slot is freed first
      --fresh;
    }
    auto it = min_count_ > 1 ? pending_.find(keys[i]) : pending_.end();
    const int64_t count = (it == pending_.end() ? 0 : it->second) + 1;
    if (min_count_ <= 1 || count >= min_count_) ++fresh;
  }
  return fresh;
}

void TableShard::PrefetchAhead(const uint64_t* keys, int64_t n, int64_t i) const {
  constexpr int64_t kAhead = 16, kNear = 6;  // slots far ahead, then rows near
  if (i + kAhead < n) index_.Prefetch(keys[i + kAhead]);
  if (i + kNear < n) {
    const uint32_t row = index_.Likely(keys[i + kNear]);
    if (row != RowMap::kNone) {
      __builtin_prefetch(&keys_[row]);
      __builtin_prefetch(Row(row));
    }
  }
}

void TableShard::Pull(const uint64_t* keys, int64_t n, float* out, uint32_t now) {
  const size_t row_values = static_cast<size_t>(dim_) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    PrefetchAhead(keys, n, i);
    const uint32_t row = Live(keys[i], now);
    float* dst = out + i * dim_;
    if (row == RowMap::kNone) {
      ++stats_.misses;
      init_.Fill(keys[i], dst);
      continue;
    }
    ++stats_.hits;
    std::memcpy(dst, Row(row), row_values);
    Touch(row, now);
  }
}

Status TableShard::Push(const uint64_t* keys, int64_t n, const float* g, float scale,
                        uint32_t now) {
  if (max_rows_ > 0 && !eviction_->drops() && rows() + NewRows(keys, n, now) > max_rows_) {
    ++stats_.refused;
    return Status::FailedPrecondition(fmt::format(
        "table '{}' is full: a push needs new rows past max_rows ({} rows in this bucket) and "
        "its eviction policy drops none; raise max_rows or choose eviction=lru or lfu",
        table_, max_rows_));
  }
  for (int64_t i = 0; i < n; ++i) {
    PrefetchAhead(keys, n, i);
    uint32_t row = Live(keys[i], now);
    if (row == RowMap::kNone) {
      if (!Admit(keys[i])) {
        ++stats_.dropped;
        continue;
      }
      row = Create(keys[i], now);
      if (row == RowMap::kNone) {  // cannot happen after the check above; kept safe
        ++stats_.dropped;
        continue;
      }
    } else {
      Touch(row, now);
    }
    float* values = Row(row);
    optimizer_.ApplyRow(values, g + i * dim_, dim_, values + dim_, scale);
    changed_[row] = true;
  }
  return Status();
}

bool TableShard::Export(bool full, const ExportRow& row, const ExportTombstone& tombstone) {
  full = full || export_full_;
  if (!full) {
    for (uint64_t key : tombstones_) tombstone(key);
  }
  for (uint32_t r = 0; r < keys_.size(); ++r) {
    if (index_.Find(keys_[r]) != r || !(full || changed_[r])) continue;
    row(keys_[r], Row(r));
    changed_[r] = false;
  }
  std::fill(changed_.begin(), changed_.end(), false);
  std::vector<uint64_t>().swap(tombstones_);
  const bool was_full = export_full_;
  export_full_ = false;
  return was_full;
}

int64_t TableShard::Expire(uint32_t now) {
  if (ttl_ == 0) return 0;
  int64_t dropped = 0;
  for (uint32_t row = 0; row < keys_.size(); ++row) {
    if (index_.Find(keys_[row]) != row || !Expired(row, now)) continue;
    Drop(row);
    ++dropped;
  }
  stats_.expired += dropped;
  return dropped;
}

void TableShard::Save(proto::TableCheckpoint& out) const {
  out.set_stride(stride_);
  std::string* keys = out.mutable_keys();
  std::string* rows = out.mutable_rows();
  std::string* touches = out.mutable_touches();
  const size_t row_size = static_cast<size_t>(stride_) * sizeof(float);
  for (uint32_t row = 0; row < keys_.size(); ++row) {
    if (index_.Find(keys_[row]) != row) continue;  // a freed row
    keys->append(reinterpret_cast<const char*>(&keys_[row]), sizeof(uint64_t));
    rows->append(reinterpret_cast<const char*>(Row(row)), row_size);
    if (ttl_ > 0) touches->append(reinterpret_cast<const char*>(&touches_[row]), sizeof(uint32_t));
    out.mutable_changed()->push_back(changed_[row] ? 1 : 0);
  }
  for (uint64_t key : tombstones_) out.add_tombstones(key);
  out.set_export_full(export_full_);
  for (const auto& [key, count] : pending_) {
    out.add_pending_keys(key);
    out.add_pending_counts(count);
  }
  for (int64_t v : {stats_.hits, stats_.misses, stats_.created, stats_.evicted, stats_.expired,
                    stats_.admitted, stats_.dropped, stats_.refused}) {
    out.add_stats(v);
  }
}

Status TableShard::Load(const proto::TableCheckpoint& in) {
  const size_t n = in.keys().size() / sizeof(uint64_t);
  const size_t row_size = static_cast<size_t>(stride_) * sizeof(float);
  if (in.stride() != stride_ || in.keys().size() % sizeof(uint64_t) != 0 ||
      in.rows().size() != n * row_size ||
      in.touches().size() != (ttl_ > 0 ? n * sizeof(uint32_t) : 0) ||
      in.pending_keys_size() != in.pending_counts_size() || in.stats_size() != 8 ||
      (max_rows_ > 0 && static_cast<int64_t>(n) > max_rows_) || rows() != 0 ||
      (!in.changed().empty() && in.changed().size() != n)) {
    return Status::Malformed(fmt::format(
        "table '{}': a checkpoint of {} bytes of keys, {} of rows of stride {} does not fit this "
        "bucket (stride {}, max_rows {})",
        table_, in.keys().size(), in.rows().size(), in.stride(), stride_, max_rows_));
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t key;
    std::memcpy(&key, in.keys().data() + i * sizeof(uint64_t), sizeof(uint64_t));
    if (index_.Find(key) != RowMap::kNone) {
      return Status::Malformed(fmt::format("table '{}': key {} saved twice", table_, key));
    }
    uint32_t touch = 0;
    if (ttl_ > 0) std::memcpy(&touch, in.touches().data() + i * sizeof(uint32_t), sizeof(touch));
    const uint32_t row = Create(key, touch);
    std::memcpy(Row(row), in.rows().data() + i * row_size, row_size);
    changed_[row] = !in.changed().empty() && in.changed()[i] != 0;
  }
  tombstones_.assign(in.tombstones().begin(), in.tombstones().end());
  export_full_ = in.export_full();
  for (int i = 0; i < in.pending_keys_size(); ++i)
    pending_[in.pending_keys(i)] = in.pending_counts(i);
  int64_t* fields[] = {&stats_.hits,    &stats_.misses,   &stats_.created, &stats_.evicted,
                       &stats_.expired, &stats_.admitted, &stats_.dropped, &stats_.refused};
  for (int i = 0; i < 8; ++i) *fields[i] = in.stats(i);
  return Status();
}

}  // namespace hetps
