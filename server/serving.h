// Serving data requests on a partition's owning thread: PUSH (decoded, held for a round or
// handed to the aggregator), PULL (answered zero-copy from a snapshot) and INIT, and applying
// closed rounds. Every partition has exactly one owning thread (the network thread for small
// partitions, an apply thread for large ones), so nothing here takes a lock.
//
// Thread-safety: ServingState is read-only once the shard map is installed, except what each
// owning thread does to its own partitions and the layer counters (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/message.h"
#include "common/shard_map.h"
#include "server/durable_store.h"
#include "server/optimizer/optimizer.h"
#include "server/partition_store.h"
#include "server/round.h"

namespace hetps {

class CmaPeers;
class Replicator;

// What the owning threads share: the partitions, how to update and encode them, and which
// thread owns which.
struct ServingState {
  int32_t self = -1;  // this server's node id
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<PartitionStore> store;
  const ShardMap* map = nullptr;
  compress::CodecCache* codecs = nullptr;  // decodes compressed pushes, encodes pulls
  // Partition ids each owner serves: owned[0] the network thread, owned[1 + k] apply thread k.
  std::vector<std::vector<int32_t>> owned;
  // Per layer, counted by whichever thread applies a push; read for the scheduler's report.
  struct LayerCounters {
    std::atomic<int64_t> pushes{0}, bytes{0}, staleness_sum{0}, max_staleness{0};
  };
  std::map<int32_t, std::unique_ptr<LayerCounters>> layers;  // keys fixed with the shard map
  // --data_dir: every update is logged before its reply, and each owner checkpoints its dirty
  // partitions every checkpoint_interval_ms (null: in memory only).
  DurableStore* durable = nullptr;
  int64_t checkpoint_interval_ms = 10000;
  // Co-located workers whose arrays requests with cma_length name (null: none).
  const CmaPeers* cma = nullptr;
  // --replicas: every logged record also goes to the rank's backups, and an update's reply
  // waits for their acknowledgements (null or inactive: no backups).
  Replicator* replicator = nullptr;
};

// A validated data request with what the consistency gate decided about it.
struct DataRequest {
  std::string identity;  // the worker's routing identity
  Message message;
  bool hold = false;      // PUSH: keep it for its clock's round (synchronous controllers)
  int64_t window = 0;     // PUSH: softsync's gradients per step (0: none)
  int64_t min_clock = 0;  // the slowest live worker's clock, echoed in the reply
};

struct DataReply {
  proto::Header header;
  std::vector<zmq::message_t> payload;
};

// Serves one PUSH / PULL / INIT and calls `reply` exactly once with its answer, as early as
// the durability level allows: a push or init is answered once it is logged (at once in
// memory), before it is applied, so the apply overlaps the reply's way to the worker. No read
// can see the partition between the two: every later request of the partition is served by
// this same thread, after the apply. REQUIRES: the calling thread owns the partition, and the
// network thread checked that it is held here.
using ReplyFn = std::function<void(DataReply&&)>;
void ServeData(const ServingState& state, DataRequest& request, std::vector<float>& scratch,
               const ReplyFn& reply);
// The same, returning the answer (for callers that send it themselves after the apply).
DataReply ServeData(const ServingState& state, DataRequest& request, std::vector<float>& scratch);

// Applies a closed round to the partitions `owner` serves; the flush round of a policy switch
// (everyone, every clock: RoundSpec::Flush()) also applies every partially filled window.
void CompleteRound(const ServingState& state, int owner, const RoundSpec& round);
// The same for one partition (a partition moved in with updates held for rounds closed here).
void ApplyRoundTo(const ServingState& state, PartitionState& part, const RoundSpec& round);

// Durability. How many bytes of updates a partition of `partition_bytes` logs before serving
// folds its log into a checkpoint: 16 copies of it while that is at most 16 MiB, else 4.
int64_t LogBytesBeforeCheckpoint(int64_t partition_bytes);
// Folds `part`'s log into a checkpoint once the log holds LogBytesBeforeCheckpoint of its
// state (no-op in memory).
void MaybeCheckpointPartition(const ServingState& state, const PartitionState& part);
// Checkpoints the dirty partitions `owner` serves; errors are logged (the log
// still holds everything, so nothing is lost, only recovery gets longer).
void CheckpointOwned(const ServingState& state, int owner);
// Restores partition `part` from the data dir: its checkpoint, then its log replayed through
// the serving code. Returns the number of log records replayed.
StatusOr<int64_t> RecoverPartition(const ServingState& state, PartitionState& part);
// A backup applies a record its primary shipped (server/replicator.h) exactly as a replay would.
Status ApplyReplicated(const ServingState& state, PartitionState& part,
                       const proto::LogRecord& record, const float* values, int64_t n);
// A logged push of a table bucket, replayed (server/table/table_serving.cc).
Status ReplayTablePush(PartitionState& part, const proto::LogRecord& record, const float* values,
                       int64_t n);

}  // namespace hetps
