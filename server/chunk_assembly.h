// ChunkAssembly: an emulated switch's chunk sums of one partition's push (aggregator/
// switch_sum.h, docs/aggregation-tier.md), gathered on the server until the push is whole; the
// whole sum then goes where any aggregator's sum goes (its contributions came with chunk 0), so
// it is applied whole or not at all, once. The switch sends a push's chunk sums in order, one
// request id for all of them; the server answers only the whole (or an error, which ends it).
//
// Bounded: one open push per (aggregator, partition). A switch that gave a stream up (a worker
// of its group did not push) sends the next clock's chunk 0 of the partition, which replaces
// the unfinished one; each held word is a float of the partition, which the server holds anyway.
//
// Thread-safety: none; the server loop's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/message.h"
#include "common/status.h"

namespace hetps {

class ChunkAssembly {
 public:
  struct Outcome {
    std::optional<Envelope> whole;  // the push, whole: serve it as the aggregator's sum
    Status error;                   // the chunk's push is refused (answer its request id)
    // A push given up (replaced by a newer one of its partition): answer it with an error.
    std::optional<std::pair<std::string, uint64_t>> replaced;  // (identity, request id)
  };
  // Aggregator h.sender()'s chunk sum of a partition of `length` elements.
  Outcome Add(Envelope& env, int64_t length);
  // Drops what aggregator `node` left unfinished (it died).
  void Forget(int32_t node);
  size_t open() const { return open_.size(); }

 private:
  struct Open {
    std::string identity;
    uint64_t request_id = 0;
    int64_t received = 0;  // chunks, in order
    proto::Header head;    // chunk 0's: contributions, clock, base version, weight
    std::vector<float> values;
  };
  Status Check(const proto::Header& h, const Envelope& env, int64_t length) const;
  static Envelope Whole(Open& o, const Envelope& last);
  std::map<std::pair<int32_t, int32_t>, Open> open_;  // (aggregator, partition)
};

}  // namespace hetps
