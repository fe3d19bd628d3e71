// SlotPool: in-network aggregation the way a programmable switch does it (SwitchML, Sapio et
// al., NSDI'21; iSwitch, Li et al., ISCA'19), at software speed, for the aggregation tier's
// switch emulation. A fixed pool of aggregation slots, each one chunk of a partition (`chunk`
// words of fixed point, common/secagg/masks.h's Encode with weight 1), sums the chunks of a
// group of `group` contributors for one (partition, clock, chunk index) and hands the sum on
// when the last one arrived; the slot then serves the next chunk. Nothing is buffered whole:
// memory is slots x chunk words (and one completed copy per slot, for retransmissions),
// whatever the tensor's size. A contributor streams a partition's chunks with at most `slots`
// in flight: chunk i goes to slot i mod slots, and chunk i + slots only once chunk i's sum came
// back (SwitchML's self-clocking); a chunk that finds its slot busy with another is refused
// (kFull) and sent again later.
//
// Exactness: the words add modulo 2^32 and are read back as int32, so as long as the true sum
// fits (the fixed point's bits are chosen for `group` contributions, secagg::FixedPointBits)
// the slot's sum is exactly the sum of the quantized values, in any arrival order.
// Exactly once: a slot keeps the set of contributors it holds; a contribution it counted
// already (a retransmission) is ignored, and one for the chunk the slot completed last is
// answered with that chunk's sum again (the shadow copy SwitchML keeps for lost results).
//
// Thread-safety: none; one per aggregator thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace hetps {

class SlotPool {
 public:
  struct Key {
    int32_t partition = 0;
    int64_t clock = 0;
    int64_t chunk = 0;  // index of the chunk in the partition
    bool operator==(const Key&) const = default;
  };
  enum class Outcome {
    kHeld,       // counted; the slot waits for the rest of the group
    kComplete,   // counted, and it was the last: `sum` is the chunk's sum
    kDuplicate,  // counted before (a retransmission): ignored
    kResent,     // the chunk completed already: `sum` is its sum again
    kFull,       // the slot holds another chunk: send again later
  };
  struct Result {
    Outcome outcome = Outcome::kHeld;
    std::span<const uint32_t> sum;  // kComplete, kResent: valid until the slot's next use
  };

  // INVALID_ARGUMENT unless slots, chunk >= 1 and 1 <= group <= 64.
  static StatusOr<SlotPool> Make(int slots, int chunk, int group);

  // Contributor `member` (0..group-1) adds its words of chunk `key` (1..chunk of them; every
  // contributor sends the same count). A bad member or size is refused with the reason and
  // changes nothing.
  StatusOr<Result> Add(const Key& key, int member, std::span<const uint32_t> words);

  // Frees the slots summing chunks of (partition, clock): their contributions are dropped.
  void Drop(int32_t partition, int64_t clock);

  int slots() const { return static_cast<int>(slots_.size()); }
  int chunk() const { return chunk_; }
  int group() const { return group_; }
  int busy() const;      // slots holding a chunk being summed
  size_t bytes() const;  // the words the pool holds: fixed at Make
  int64_t completed() const { return completed_; }

 private:
  struct Slot {
    bool busy = false;
    Key key;
    uint64_t members = 0;  // bit i: contributor i counted
    size_t size = 0;       // words of the chunk being summed
    std::vector<uint32_t> sum;
    bool done = false;  // `last` is the sum of `done_key` (`done_size` words)
    Key done_key;
    size_t done_size = 0;
    std::vector<uint32_t> last;
  };
  SlotPool() = default;
  int chunk_ = 0, group_ = 0;
  std::vector<Slot> slots_;
  int64_t completed_ = 0;
};

}  // namespace hetps
