// ShardMap: which server holds which (tensor, offset, length). Built once by the scheduler from
// the tensors the workers declare, then shared with every node; every node looks partitions up
// in the same immutable map.
//
// Rules (deterministic, so any node computing it from the same input gets the same map):
//  - tensors are ordered by name; a tensor's id is its position;
//  - a tensor of B bytes is cut into ceil(B / partition_bytes) partitions of near-equal length
//    (lengths differ by at most one element), each at most partition_bytes;
//  - partitions are placed largest first on the server holding the fewest bytes so far (ties:
//    lower tensor id, lower index, lower server rank), so max load - min load <= the largest
//    partition;
//  - a sparse table (TensorSpec::table) is cut by key instead: kTableBucketsPerServer x
//    num_servers buckets, bucket b on server b mod num_servers, and key k in bucket
//    TableBucketOf(k, buckets) (a 64-bit mix of the key, so any key set spreads evenly). Each
//    bucket is a partition of length 0: its rows live in the server's table store.
//  - live re-sharding (docs/resharding.md) moves dense partitions to other ranks: the map then
//    lists each partition that is not on its rules' rank (moves()) and counts the placement
//    changes so far (epoch()); everything else is still the rules'. The rules place over the
//    ranks the map was built with (base_servers()); ranks added later hold only what moved to
//    them, and a retired rank (its server drained and gone) holds nothing.
//
// Thread-safety: immutable after construction; safe to share.
//
// Part of hetps's public API (installed as <hetps/shard_map.h>; Client::shard_map()).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hetps/status.h"

namespace hetps {

namespace proto {
class ShardMap;
}

constexpr int64_t kDefaultPartitionBytes = 4 << 20;
// Buckets of a sparse table per server: several, so that a server's apply threads share its
// rows and a later re-sharding moves whole buckets.
constexpr int kTableBucketsPerServer = 4;

// A sparse embedding table (Client::DeclareTable, docs/tables.md): rows of `dim` floats keyed by
// any uint64 id, each created on its first push from an initializer that depends only on
// (seed, table name, key), and updated row by row by the table's optimizer (lazy: only pushed
// rows change).
struct TableOptions {
  int64_t dim = 0;       // floats per row; 0: not a table
  int64_t max_rows = 0;  // rows one server keeps at most; 0: no limit
  // What makes room for a new row past max_rows, from the eviction registry: "lru", "lfu", or
  // "none" (a push that needs a new row is refused).
  std::string eviction = "none";
  int64_t min_count = 0;   // admission: a key gets a row at its min_count-th push (0 or 1: first)
  double ttl_seconds = 0;  // expiry: a row untouched this long is dropped (0: never) ...
  int64_t ttl_clocks = 0;  // ... or untouched for this many clocks of the pushing workers
  // A new row's values: "zeros", "uniform" in [-init_scale, init_scale], or "normal" with
  // standard deviation init_scale.
  std::string init = "normal";
  double init_scale = 0.01;
  uint64_t seed = 0;
  // The row-wise optimizer spec (e.g. "adagrad:lr=0.05"); empty: the servers' --optimizer.
  std::string optimizer;

  bool operator==(const TableOptions&) const = default;
  // Checks what can be checked without a server's registries (dims, counts, words).
  Status Validate(const std::string& table) const;
};

struct TensorSpec {
  TensorSpec() = default;
  TensorSpec(std::string name, std::vector<int64_t> shape, int32_t layer = 0,
             TableOptions table = {})
      : name(std::move(name)), shape(std::move(shape)), layer(layer), table(std::move(table)) {}

  std::string name;
  std::vector<int64_t> shape;
  int32_t layer = 0;
  TableOptions table;  // table.dim > 0: a sparse table, and shape is {table.dim}

  bool is_table() const { return table.dim > 0; }
  int64_t NumElements() const;
  int64_t NumBytes() const { return NumElements() * static_cast<int64_t>(sizeof(float)); }
};

// The bucket of key `key` among `buckets` (> 0): a 64-bit mix of the key reduced to the range.
int32_t TableBucketOf(uint64_t key, int32_t buckets);

struct Partition {
  int32_t id = 0;  // global partition id
  int32_t tensor_id = 0;
  int32_t index = 0;   // within the tensor
  int64_t offset = 0;  // first element within the tensor
  int64_t length = 0;  // elements
  int32_t server_rank = 0;
};

class ShardMap {
 public:
  ShardMap() = default;

  // Validates `tensors` (unique non-empty names, positive dims, float32) and builds the map.
  static StatusOr<ShardMap> Build(std::vector<TensorSpec> tensors, int num_servers,
                                  int64_t partition_bytes = kDefaultPartitionBytes);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<Partition>& partitions() const { return partitions_; }
  int num_servers() const { return num_servers_; }
  int64_t partition_bytes() const { return partition_bytes_; }

  // -1 when no tensor has that name.
  int32_t TensorId(const std::string& name) const;
  // Partition ids of a tensor, in offset order. REQUIRES: 0 <= tensor_id < tensors().size().
  const std::vector<int32_t>& PartitionsOf(int32_t tensor_id) const {
    return by_tensor_[tensor_id];
  }
  // Bytes placed on each server (a table's buckets count 0: their rows come and go).
  std::vector<int64_t> ServerBytes() const;
  // Placement changes applied so far, and the partitions not on their rules' rank (id -> rank).
  int64_t epoch() const { return epoch_; }
  // The ranks the rules placed over (num_servers() counts ranks added since), and the ranks
  // retired (their servers drained and gone: nothing is placed there, no request goes there).
  int base_servers() const { return base_servers_; }
  const std::set<int32_t>& retired() const { return retired_; }
  bool serving(int32_t rank) const {
    return rank >= 0 && rank < num_servers_ && !retired_.contains(rank);
  }
  // This map with `num_servers` ranks (at least as many as now) of which `retired` are retired
  // (none may hold a partition; one at least must serve), at the next epoch.
  StatusOr<ShardMap> WithRanks(int num_servers, const std::set<int32_t>& retired) const;
  const std::map<int32_t, int32_t>& moves() const { return moves_; }
  // This map with partitions placed on other ranks (id -> rank) at `epoch` (negative: the next
  // one). Only dense partitions move (a table's buckets stay); every rank must be the map's.
  StatusOr<ShardMap> WithMoves(const std::map<int32_t, int32_t>& moves, int64_t epoch = -1) const;
  // The partition that holds key `key` of table `tensor_id`. REQUIRES: that tensor is a table.
  int32_t TablePartition(int32_t tensor_id, uint64_t key) const {
    const std::vector<int32_t>& buckets = by_tensor_[tensor_id];
    return buckets[TableBucketOf(key, static_cast<int32_t>(buckets.size()))];
  }

 private:
  // The wire form's reader sets the ranks before it applies the moves (common/shard_map.h).
  friend StatusOr<ShardMap> ShardMapFromProto(const proto::ShardMap& map);
  void Index();
  void AddTableBuckets(int32_t tensor_id);

  std::vector<TensorSpec> tensors_;
  std::vector<Partition> partitions_;
  std::vector<std::vector<int32_t>> by_tensor_;
  std::unordered_map<std::string, int32_t> tensor_ids_;
  int num_servers_ = 0;
  int64_t partition_bytes_ = kDefaultPartitionBytes;
  int64_t epoch_ = 0;
  std::map<int32_t, int32_t> moves_;
  int base_servers_ = 0;
  std::set<int32_t> retired_;
};

}  // namespace hetps
