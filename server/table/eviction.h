// EvictionPolicy: which row of a full table shard makes room for a new one (TableOptions::
// max_rows), chosen by a spec string from the registry below ("lru", "lfu", "none"). A policy
// keeps its own per-row bookkeeping, indexed by the shard's row numbers; adding one is a file
// in server/table/eviction/ with its Register function, its line in evictions.def, and its
// test (tests/unit/server/table_test.cc derives the policies to check from the registry).
//
// Thread-safety: none; the shard's owning thread uses it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/status.h"

namespace hetps {

class EvictionPolicy {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  virtual ~EvictionPolicy() = default;
  // Row `row` was created, touched (pulled or pushed), or dropped (evicted, expired).
  virtual void Inserted(uint32_t row) = 0;
  virtual void Touched(uint32_t row) = 0;
  virtual void Erased(uint32_t row) = 0;
  // Whether it ever drops a row (false: a full shard refuses new rows).
  virtual bool drops() const { return true; }
  // The row to drop for a new one (kNone when it holds none, or never drops).
  virtual uint32_t Victim() const = 0;
  virtual int64_t bytes() const = 0;  // its bookkeeping's memory
};

struct EvictionEntry {
  std::function<std::unique_ptr<EvictionPolicy>(const AlgorithmSpec&)> make;
};
using EvictionRegistry = Registry<EvictionEntry>;
// Every policy (eviction/evictions.def).
const EvictionRegistry& Evictions();
StatusOr<std::unique_ptr<EvictionPolicy>> MakeEviction(const std::string& spec);

#define HETPS_EVICTION(Name) void Register##Name(EvictionRegistry& r);
#include "server/table/eviction/evictions.def"
#undef HETPS_EVICTION

// An intrusive doubly linked list of row numbers (most recent at the front), the bookkeeping
// LRU and LFU share: 8 bytes per row.
class RowList {
 public:
  bool empty() const { return head_ == EvictionPolicy::kNone; }
  uint32_t back() const { return tail_; }
  void PushFront(uint32_t row);
  void Remove(uint32_t row);
  // The links of every row, shared by several lists (LFU's one list per count).
  struct Links {
    std::vector<uint32_t> prev, next;
    void Grow(uint32_t row);
  };
  explicit RowList(Links* links) : links_(links) {}

 private:
  Links* links_;
  uint32_t head_ = EvictionPolicy::kNone, tail_ = EvictionPolicy::kNone;
};

}  // namespace hetps
