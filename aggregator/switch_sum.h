// SwitchSum: an aggregator working as an emulated programmable switch (docs/aggregation-tier.md,
// "Switch emulation"; SwitchML, Sapio et al., NSDI'21; iSwitch, Li et al., ISCA'19). Each
// worker of the group streams its push of a partition as chunks of fixed-point words
// (proto::SwitchSpec), at most `slots` in flight; chunk i of every member sums in one slot of the
// partition's SlotPool (aggregator/slot_pool.h), and once the last member's chunk arrived the
// chunk's sum goes upstream and every member hears that chunk i is summed, so it sends chunk
// i + slots (self-clocking). Nothing is held whole: memory is slots x chunk words per partition
// being streamed (its pool is dropped once the stream completed), whatever the tensor's size.
//
// One stream per (partition, clock), the pushes of every member of the group (a synchronous
// controller's round). A member's chunks arrive in its order, so chunk i completes before chunk
// i + 1: the server gets the chunk sums in order, the first carrying the contributions (each
// member's numbered push), and applies the sum once it has all of them.
//
// A stream fails (every member's push is answered with the reason and goes to its server
// directly) when it makes no progress for `wait_s` (a member that does not push the partition
// this clock), a member pushes it twice in one clock, a member dies, or a chunk does not fit
// the stream; the chunks of a failed stream that still arrive are refused, once per worker.
//
// Thread-safety: none; one per aggregator loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/group_sum.h"
#include "aggregator/slot_pool.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

class SwitchSum {
 public:
  struct Options {
    proto::SwitchSpec spec;      // chunk, slots, clip; bits by the group (FixedPointBits)
    std::vector<int32_t> group;  // the workers (node ids) that stream here
    double wait_s = 1.0;         // a stream's longest time without a chunk summed
    int64_t max_elements = int64_t{1} << 24;
    // Numbers a stream when its first chunk's sum goes upstream (the aggregator's request ids,
    // whose order its shared reads go by); null: first_stream, first_stream + 1, ...
    std::function<uint64_t()> next_id = nullptr;
  };
  using Waiter = GroupSum::Waiter;
  // A chunk every member sent: its sum goes upstream, and each of `acks` hears it was summed.
  struct ChunkSum {
    uint64_t stream = 0;  // the stream's number (its sum's request id upstream)
    int32_t partition = 0;
    int32_t rank = 0;
    proto::Chunk chunk;
    std::span<const uint32_t> words;  // valid until the next Add
    std::vector<Waiter> acks;
    // The first chunk: what the server's push is (contributions, clock, base version, ...).
    std::optional<proto::Header> head;
    // The last chunk: the members' pushes, answered with the server's reply to the sum.
    std::vector<Waiter> waiters;
  };
  // A stream that failed: its members' pushes are answered with `why`.
  struct Failed {
    uint64_t stream = 0;
    int32_t partition = 0;
    std::vector<Waiter> waiters;
    Status why;
  };
  // What a chunk did: summed (the chunk's sum, if it was the last member's), refused (the
  // worker's push is answered with `refused` unless `silent`), and a stream it broke.
  struct Added {
    std::optional<ChunkSum> sum;
    Status refused;
    bool silent = false;  // refused, and the worker was told already: say nothing
    std::optional<Failed> failed;
  };

  // INVALID_ARGUMENT for a spec without chunk or slots, or a group of more than 64.
  static StatusOr<SwitchSum> Make(Options options, uint64_t first_stream);
  // The fixed point every member encodes with: the spec, its bits for the group's size.
  const proto::SwitchSpec& spec() const { return options_.spec; }

  // Worker h.sender()'s chunk h.chunk() of partition h.partition() at clock h.clock() (checked
  // to be one of the group's, for a server rank). A chunk that does not fit is refused, and
  // fails its stream, if any.
  Added Add(const proto::Header& h, const std::string& identity, std::span<const uint32_t> words,
            double now);
  // Streams without progress for wait_s.
  std::vector<Failed> Due(double now);
  // `worker` died: every open stream fails (the group shrinks; later streams are of the rest).
  std::vector<Failed> Forget(int32_t worker);
  // Stream `stream` ends here (its server refused it or died; its members were answered): the
  // chunks of it that still come are refused, once per worker.
  void Abandon(uint64_t stream);
  // Every open stream (stopping).
  std::vector<Failed> TakeAll(const Status& why);

  size_t open() const { return streams_.size(); }
  size_t slot_bytes() const;
  size_t peak_slot_bytes() const { return peak_bytes_; }
  int64_t chunks() const { return chunks_; }
  const std::set<int32_t>& live() const { return live_; }

 private:
  using Key = std::pair<int32_t, int64_t>;  // (partition, clock)
  struct Stream {
    uint64_t id = 0;
    int32_t rank = 0;
    proto::Chunk shape;  // count and elements
    std::vector<std::optional<Waiter>> members;
    proto::Header head;  // clock, layer, base version, weight, contributions
    double losses = 0;
    int reported_losses = 0;
    int64_t summed = 0;  // chunks completed (in order)
    double touched = 0;
  };
  explicit SwitchSum(Options options) : options_(std::move(options)) {}
  Status CheckShape(const proto::Header& h, const Stream* s) const;
  Status CheckOrder(const proto::Header& h, const Stream* s, int member) const;
  Stream& Join(const Key& key, Stream* s, const proto::Header& h, const std::string& identity,
               int member, double now);
  StatusOr<SlotPool*> PoolFor(int32_t partition, const Stream& s);
  void DropIdlePools();
  Failed Fail(Key key, Status why);
  ChunkSum Complete(const Key& key, Stream& s, int64_t index, std::span<const uint32_t> sum,
                    double now);

  Options options_;
  std::set<int32_t> live_;
  std::map<int32_t, int> member_;  // worker -> member index (by live_'s order)
  uint64_t next_stream_ = 1;
  std::map<Key, Stream> streams_;
  std::map<int32_t, SlotPool> pools_;        // partitions being streamed
  std::map<Key, std::set<int32_t>> failed_;  // failed streams -> workers told
  size_t peak_bytes_ = 0;
  int64_t chunks_ = 0;
};

}  // namespace hetps
