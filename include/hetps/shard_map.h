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
//    partition.
//
// Thread-safety: immutable after construction; safe to share.
//
// Part of hetps's public API (installed as <hetps/shard_map.h>; Client::shard_map()).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "hetps/status.h"

namespace hetps {

constexpr int64_t kDefaultPartitionBytes = 4 << 20;

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int32_t layer = 0;

  int64_t NumElements() const;
  int64_t NumBytes() const { return NumElements() * static_cast<int64_t>(sizeof(float)); }
};

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
  // Bytes placed on each server.
  std::vector<int64_t> ServerBytes() const;

 private:
  void Index();

  std::vector<TensorSpec> tensors_;
  std::vector<Partition> partitions_;
  std::vector<std::vector<int32_t>> by_tensor_;
  std::unordered_map<std::string, int32_t> tensor_ids_;
  int num_servers_ = 0;
  int64_t partition_bytes_ = kDefaultPartitionBytes;
};

}  // namespace hetps
