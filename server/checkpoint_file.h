// A checkpoint file: a partition's checkpoint that the value log has no room for
// (server/durable_store.h), written and read straight from and into the partition's arrays.
// Its bytes: a header {magic "HEcf", reserved, meta_bytes, array_bytes, hash}, the checkpoint
// without its arrays (proto::PartitionCheckpoint, meta_bytes), then the arrays raw, one after
// the other (array_bytes in all); `hash` is XXH3 over everything after the header. A reader
// checks the magic, every size against the file's and the partition's, and the hash, before it
// trusts any of it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"

namespace hetps {

// Writes `meta` and `arrays` (each `array_bytes` long) to `path`, fdatasync'ed when `sync`.
// On failure the file is removed and the error names `path`.
Status WriteCheckpointFile(const std::string& path, const proto::PartitionCheckpoint& meta,
                           const std::vector<const float*>& arrays, size_t array_bytes, bool sync);
// Reads the file at `path` into `meta` and `arrays` (each `array_bytes` long). A file that is
// short, of other sizes or whose hash does not match is refused as Malformed ("damaged").
Status ReadCheckpointFile(const std::string& path, proto::PartitionCheckpoint& meta,
                          const std::vector<float*>& arrays, size_t array_bytes);

}  // namespace hetps
