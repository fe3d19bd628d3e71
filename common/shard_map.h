// The wire form of the shard map (include/hetps/shard_map.h) and of a tensor's declaration.
#pragma once

#include "common/status.h"
#include "hetps.pb.h"
#include "hetps/shard_map.h"

namespace hetps {

proto::ShardMap ToProto(const ShardMap& map);
// Rebuilds the map from its declared tensors and checks that the received placement is the one
// the rules give: a node never trusts a map it could not have computed itself.
StatusOr<ShardMap> ShardMapFromProto(const proto::ShardMap& map);

proto::TensorSpec ToProto(const TensorSpec& spec);
TensorSpec FromProto(const proto::TensorSpec& spec);

}  // namespace hetps
