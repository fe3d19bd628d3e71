// PartitionStore: the model partitions this server holds (values, optimizer slots, version).
//
// Thread-safety: the store's shape is fixed at construction. Each partition must be touched by
// one thread at a time; the server guarantees it by giving every partition one owning apply
// thread, so pushes and pulls of different partitions never share a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>
#include <zmq.hpp>

#include "common/shard_map.h"
#include "common/status.h"
#include "server/aggregation/aggregator.h"
#include "server/initializer.h"
#include "server/optimizer/optimizer.h"
#include "server/round.h"

namespace hetps {

namespace proto {
class PartitionCheckpoint;
}
class TableBucket;

class PartitionState {
 public:
  PartitionState(const Partition& partition, int num_slots);
  ~PartitionState();
  PartitionState(const PartitionState&) = delete;
  PartitionState& operator=(const PartitionState&) = delete;

  // A sparse table's bucket (server/table/table_bucket.h): its rows live there, and this
  // state keeps only the version and what was applied. Null for a dense partition.
  TableBucket* table() { return table_.get(); }
  void set_table(std::unique_ptr<TableBucket> table);
  void CountUpdate() { ++version_; }  // a table push applied
  // The bytes of its state a checkpoint copies: its values, or a table bucket's rows.
  int64_t state_bytes() const;

  const Partition& info() const { return info_; }
  bool initialized() const { return initialized_; }
  int64_t version() const { return version_; }  // updates applied so far
  // The round being handed to the aggregator: its RoundSpec::noise_std (negative: none).
  double round_noise_std() const { return round_noise_std_; }
  const float* values() const { return values_->data(); }
  // Values to write; copies them first if a snapshot of the current ones is still held
  // (copy-on-write), so a snapshot never changes under its reader.
  float* mutable_values();
  void MarkInitialized() { initialized_ = true; }
  // How pushes combine into this partition (sum when none was set).
  Aggregator* aggregator() { return aggregator_.get(); }
  void set_aggregator(std::unique_ptr<Aggregator> a) { aggregator_ = std::move(a); }

  // The current values, read-only, kept alive by the returned reference. Lets a pull reply
  // send the partition's memory without copying it; the next update then writes a fresh copy
  // if the reply is still in flight. The reference may be dropped on any thread.
  std::shared_ptr<const std::vector<float>> Snapshot() const { return values_; }

  // Applies one gradient of info().length floats with `optimizer`; one new version.
  // REQUIRES: initialized(), g has info().length elements.
  void ApplyGradient(const Optimizer& optimizer, const float* g, float scale);
  // Replaces the values (a mixing aggregator's result); one new version.
  void SetValues(const float* values);
  // Sets the values if none were set yet (first writer wins); returns whether it did.
  bool InitializeFrom(const float* values);

  // Synchronous consistency: keeps worker `w`'s update for clock `clock` (a zero-copy frame
  // of info().length floats, with its sample count and base version) until a round uses it.
  void Hold(int64_t clock, int32_t w, zmq::message_t update, double weight = 1,
            int64_t base_version = 0);
  // Applies a closed round (server/round.h) to what is held; returns the steps applied. Per
  // clock, workers are summed in id order (then arrival order), so a bsp round is exactly
  // sequential mini-batch SGD over all workers' batches. A held update is used at most once.
  int ApplyRound(const Optimizer& optimizer, const RoundSpec& round);
  size_t held_clocks() const { return held_.size(); }
  // How many updates of worker `w` wait for a round, over every clock.
  int64_t HeldBy(int32_t w) const;
  // The most updates one worker may have waiting for rounds in one partition: a worker sends a
  // partition one update per clock, and rounds close within a few clocks, so only a broken or
  // hostile client reaches it (each costs a partition's size in memory until its round).
  static constexpr int64_t kMaxHeldPerWorker = 64;

  // Exactly-once: whether the update numbered `seq` by client incarnation `incarnation` was
  // applied already (seq 0: unnumbered, never), and recording that it was. A client numbers
  // its updates to a partition 1, 2, ... and they arrive in that order.
  bool Applied(uint64_t incarnation, int64_t seq) const;
  void MarkApplied(uint64_t incarnation, int64_t seq);

  // Durability: everything above as a checkpoint (values, optimizer slots, version, what was
  // applied, held updates, the aggregator's state), and back into a fresh partition.
  void Save(proto::PartitionCheckpoint& out) const;
  Status Load(const proto::PartitionCheckpoint& in);
  // The same in two parts, for a checkpoint kept as raw arrays (DurableStore's checkpoint
  // files): the state without the values and the slots, and those arrays, the values first,
  // then each optimizer slot, info().length floats each. LoadMeta expects the arrays written
  // through MutableArrays already.
  void SaveMeta(proto::PartitionCheckpoint& out) const;
  Status LoadMeta(const proto::PartitionCheckpoint& in);
  std::vector<const float*> Arrays() const;
  std::vector<float*> MutableArrays();

 private:
  Partition info_;
  std::shared_ptr<std::vector<float>> values_;
  std::vector<std::vector<float>> slots_;
  std::vector<float*> slot_ptrs_;
  int64_t version_ = 0;
  bool initialized_ = false;
  double round_noise_std_ = -1;
  int HandOverRound(const RoundSpec& round);
  // A secure round (RoundSpec::secure): the kept workers' words of round.clock summed mod 2^32,
  // the named masks removed, decoded, and one step on the weighted mean; everything held up to
  // the clock is dropped. Applies nothing when a kept worker's upload is missing here.
  int ApplySecure(const Optimizer& optimizer, const RoundSpec& round);
  int ApplyCommitted(const RoundSpec& round);

  struct Held {
    zmq::message_t update;
    double weight;
    int64_t base_version;
  };
  std::map<int64_t, std::map<int32_t, std::vector<Held>>> held_;  // clock -> worker -> updates
  std::vector<float> sum_;                                        // scratch for ApplyHeld
  std::unique_ptr<Aggregator> aggregator_;
  std::unique_ptr<TableBucket> table_;
  std::map<uint64_t, int64_t> applied_;  // client incarnation -> highest seq applied
};

// What a ROUND_CLOSE's secure part must be for ApplySecure: a positive clip, bits 1..30, seeds of
// 32 bytes with sign +1 or -1.
Status CheckSecureClose(const proto::SecureClose& secure);

class PartitionStore {
 public:
  // Holds every partition that `map` places on `server_rank`; seeded rules fill them now.
  // Each partition gets its own aggregator, made from `aggregation` (a parsed spec; none:
  // sum). REQUIRES: `optimizer` and `initializer` outlive the store.
  PartitionStore(const ShardMap& map, int server_rank, const Optimizer& optimizer,
                 const Initializer& initializer, const AlgorithmSpec* aggregation = nullptr);

  // nullptr when partition `id` is not held here (or does not exist). Any thread.
  PartitionState* Find(int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < size_ ? ptrs_[id].load(std::memory_order_acquire)
                                                      : nullptr;
  }
  int64_t num_partitions() const { return count_.load(std::memory_order_relaxed); }
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

  // Live re-sharding (docs/resharding.md), on the network thread. A fresh partition `p` (not
  // held, dense) to fill with a moved-in state; Find() does not return it until it is published
  // (Publish, any thread: its owner, once the state is in).
  StatusOr<PartitionState*> Make(const Partition& p);
  void Publish(PartitionState* part);
  // Stops holding partition `id`: Find() returns nullptr from now on; the state itself is given
  // to the caller, to be destroyed once its owner is done with it. Null if not held.
  std::unique_ptr<PartitionState> Release(int32_t id);

 private:
  std::unique_ptr<PartitionState> New(const Partition& p) const;

  const Optimizer& optimizer_;
  AlgorithmSpec aggregation_;
  size_t size_ = 0;
  std::vector<std::unique_ptr<PartitionState>> by_id_;  // network thread
  std::unique_ptr<std::atomic<PartitionState*>[]> ptrs_;
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> bytes_{0};
};

}  // namespace hetps
