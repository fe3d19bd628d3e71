// TableBucket: one bucket of a sparse table as its server holds it (a partition of length 0 in
// the shard map): the shard of rows built from the table's options, the updates a synchronous
// controller holds for their round, and the clock of time stamps its ttl counts in.
//
// Thread-safety: none; the partition's owning thread uses it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "hetps/shard_map.h"
#include "server/optimizer/optimizer.h"
#include "server/round.h"
#include "server/table/table_shard.h"

namespace hetps {

class TableBucket {
 public:
  // `cap`: this bucket's share of the table's max_rows on this server (0: none). A table whose
  // optimizer or eviction spec does not parse gets no shard: error() says why, and every
  // request to it is answered with that.
  TableBucket(const TensorSpec& table, int64_t cap, const Optimizer& server_optimizer);

  TableShard* shard() { return shard_.get(); }
  const TableShard* shard() const { return shard_.get(); }
  const Status& error() const { return error_; }
  // The stamp of an access by a request of `clock` now: the clock itself with ttl_clocks,
  // else the wall clock's seconds (so that stamps survive a restart on the data dir).
  uint32_t Stamp(int64_t clock) const;
  // With a ttl: drops the expired rows once half a ttl passed since the last sweep (a row
  // that expired is never served before then either: the shard checks each row it touches).
  void MaybeExpire(uint32_t now);

  // Synchronous consistency: worker `w`'s push of `n` keys (the frame: keys, then rows) waits
  // for the round of `clock`.
  void Hold(int64_t clock, int32_t w, zmq::message_t update, int64_t n);
  int64_t HeldBy(int32_t w) const;
  // Durability: the shard's rows and the held pushes into `out`, and back.
  void Save(proto::TableCheckpoint& out) const;
  Status Load(const proto::TableCheckpoint& in);
  // Applies a closed round (bsp: every worker's updates of each clock <= round.clock, summed
  // per key, one step per clock; also only_clock, one_step and kMean). Returns the steps.
  int ApplyRound(const RoundSpec& round, uint32_t now);

 private:
  struct Held {
    zmq::message_t update;
    int64_t n = 0;
  };
  // Sums `updates` into one row per key and pushes them as one step, scaled.
  void Step(const std::vector<const Held*>& updates, float scale, uint32_t now);

  const TableOptions options_;
  std::unique_ptr<Optimizer> own_optimizer_;  // the table's optimizer spec, when it has one
  std::unique_ptr<TableShard> shard_;
  Status error_;
  uint32_t swept_ = 0;                                            // the stamp of the last sweep
  std::map<int64_t, std::map<int32_t, std::vector<Held>>> held_;  // clock -> worker -> pushes
};

// The ttl in the units of TableBucket::Stamp.
uint32_t TtlStamps(const TableOptions& options);

}  // namespace hetps
