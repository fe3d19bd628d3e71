// ServerLoop: a server's network thread (ServerNode, server.h, runs one). Its members are
// defined by concept:
//   server_loop.cc        set-up, the loop, reports, the scheduler's control messages, the map
//   server_requests.cc    the workers' requests: checked, gated, served, answered (batched)
//   server_transports.cc  the co-located transports (shared memory, cross memory attach)
//   server_durability.cc  the data dir: restore, checkpoints, whole-run cuts
//   server_replication.cc --replicas: a primary's backups, a backup's records, promotion
//   server_moves.cc       live re-sharding: partitions moved out and in, a new map's epoch
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/batch.h"
#include "common/cluster_view.h"
#include "common/compress/codec.h"
#include "common/connection_guard.h"
#include "common/cut.h"
#include "common/logging.h"
#include "common/message.h"
#include "common/same_message.h"
#include "common/scheduler_link.h"
#include "common/shard_map.h"
#include "common/shm_segment.h"
#include "server/apply_threads.h"
#include "server/chunk_assembly.h"
#include "server/cma_peers.h"
#include "server/consistency_gate.h"
#include "server/cut_file.h"
#include "server/durable_store.h"
#include "server/fault_point.h"
#include "server/mover.h"
#include "server/replicator.h"
#include "server/server.h"
#include "server/serving.h"
#include "server/table/table_serving.h"

namespace hetps {

// Answers of one batch go back together up to this many payload bytes per message (a pull of a
// larger partition goes alone).
constexpr int64_t kAnswerBatchBytes = int64_t{256} << 10;

// The network thread: owns the sockets to the workers and the scheduler, validates every
// request, and serves the small partitions itself; the consistency gate decides when, the
// apply threads own the large partitions.
class ServerLoop {
 public:
  ServerLoop(const ServerOptions& options, const std::atomic<bool>& stop)
      : options_(options), stop_(stop) {}

  Status Run();

 private:
  Status Setup();
  void Poll();  // one turn: replies from the apply threads, requests, control messages
  void HandleWorker(Envelope& env);
  void HandleControl(Envelope& env);
  void OnWorkerJoined(const proto::Header& h);
  Status InstallShardMap(const proto::ShardMap& proto_map);
  Status OpenDataDir();
  Status RestoreShards();
  // RestoreShards' replay of every partition the data dir holds, owners side by side.
  Status RecoverOwned();
  Status RestoreCut();
  void MaybeCheckpoint();
  // Whole-run checkpoints: the scheduler's request, and on every turn, writing the cut once
  // every live worker reached its clock and answering once every owner wrote its part.
  void OnCheckpoint(const proto::Header& h);
  // The scheduler's EXPORT of a sparse table (server/table/table_export.h), or its call-off.
  void OnExport(const proto::Header& h);
  void ProgressCut();
  void ReleaseDeferred(std::deque<Envelope> deferred);
  Status CheckSender(const Envelope& env) const;
  void Reject(const Envelope& env, const Status& s);
  Status CheckAggregated(const proto::Header& h) const;
  Status CheckRequest(const Envelope& env) const;
  // The co-located transport (worker/shm_channel.h): a worker's SHM_ATTACH maps its segment;
  // a data request with shm_length gets the slot it names, checked to lie within the segment,
  // as its payload frame (which keeps the mapping alive while anything holds it).
  void AttachShm(Envelope& env);
  Status BorrowShm(Envelope& env);
  // The cross memory attach transport (server/cma_peers.h): CMA_ATTACH probes the worker's
  // memory, CMA_REVOKE ends it; a data request with cma_length is checked to come from an
  // attached worker, and its apply thread makes the copy.
  void AttachCma(Envelope& env);
  void RevokeCma(Envelope& env);
  // Replication (docs/replication.md): BACKUPS from the scheduler (a primary ships to the set,
  // snapshots first to new members; a backup learns whom it follows), a backup's REPLICATE
  // (applied on the partition's owning thread, acknowledged from there), PROMOTE (the backup
  // serves its rank from now on), and a backup telling the scheduler it holds every partition.
  void OnBackups(const proto::Header& h);
  void ShipSnapshots(const std::vector<int32_t>& to);
  void OnReplicate(Envelope& env);
  void OnPromote(const proto::Header& h);
  void MaybeReportSynced();
  // A backup tells the scheduler whom it follows and (once) that it holds every partition.
  void ReportReplica(bool synced = false);
  // A planned hand-over (scheduler DRAIN; server_drain.cc): requests wait unanswered; once
  // every owner finished what it took and the replicator holds no unacknowledged shipment,
  // DRAINED tells the scheduler, which retires this server (SHUTDOWN: the workers resend what
  // waited to the promoted backup) or has it serve again (RESUME, or a restarted scheduler).
  void OnDrain(const proto::Header& h);
  void OnResume();
  void MaybeFinishDrain();
  // Whether the loop ends now. Asked to stop (SIGTERM, SIGINT), a primary whose rank has
  // backups first asks the scheduler to hand the rank over (DRAIN for itself), so that stopping
  // it (a Compose scale-down, a Kubernetes pod deleted) pauses nothing; bounded by 5 s, and a
  // refusal stops it at once.
  bool Stopping();
  // Live re-sharding (server_moves.cc, docs/resharding.md): the scheduler's MOVE (what is
  // refused: CheckMove), each turn's progress (MOVED once every target holds its partitions),
  // the move's end without a new map (serve again), a new map (release what moved away), a
  // target's MOVE_STATE and its adoption on the owning thread, requests of moving partitions
  // (deferred) and of partitions that left (answered with the epoch), and under bsp an update
  // that reached a moved-in partition after its round closed here (applied at once).
  Status CheckMove(const proto::Move& move) const;
  void OnMove(const proto::Header& h);
  void ProgressMove();
  void EndMove(const Status& s);
  void OnMapUpdate(const proto::ShardMap& proto_map);
  void Drop(int32_t id, int64_t epoch);
  void OnMoveState(Envelope& env);
  void Adopt(PartitionState* part, std::shared_ptr<proto::PartitionCheckpoint> state,
             const std::string& identity, const proto::Header& h);
  bool DeferMoving(Envelope& env);
  bool AnswerMoved(const Envelope& env);
  int32_t LateFor(const DataRequest& request) const;
  void LateRound(int32_t id, int owner);
  // Where partitions are now: the newest map (map_ as installed, or a later epoch's).
  const ShardMap& Placement() const { return placement_ ? *placement_ : *map_; }
  void Serve(DataRequest&& request);  // on the partition's owning thread
  void ApplyRound(const RoundSpec& round);
  int Owner(const Partition& p) const {
    return p.length * static_cast<int64_t>(sizeof(float)) <= options_.inline_apply_bytes
               ? 0
               : 1 + p.id % options_.threads;
  }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Reply(const std::string& identity, proto::Header header) {
    header.set_sender(link_->id());
    Answer(identity, std::move(header), std::vector<zmq::message_t>{});
  }
  // Batches (common/batch.h): the parts of a worker's batch go through HandleWorker one by one;
  // what they are answered at once goes back to it as one batch (SendAnswers after the last).
  void HandleBatch(Envelope& env);
  void Answer(const std::string& identity, proto::Header&& header,
              std::vector<zmq::message_t>&& payload);
  void SendAnswers();
  void FillReport(proto::Header& h) const;

  const ServerOptions& options_;
  const std::atomic<bool>& stop_;
  zmq::context_t ctx_{1};
  // The scheduler link has its own I/O thread: heartbeats must not queue behind a GiB of pushes
  // arriving on the data plane (the scheduler would declare a busy server dead).
  zmq::context_t control_ctx_{1};
  std::optional<zmq::socket_t> router_;
  std::optional<ZapHandler> zap_;         // auth.curve: admits worker keys to router_
  std::optional<ConnectionGuard> guard_;  // before router_ goes
  std::optional<ApplyThreads> apply_threads_;
  std::unique_ptr<SchedulerLink> link_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<AlgorithmSpec> aggregator_;
  std::optional<Initializer> initializer_;
  std::optional<ShardMap> map_;
  compress::CodecCache codecs_;
  ServingState state_;
  std::vector<float> scratch_;
  std::unordered_set<int32_t> dead_;
  std::unordered_map<int32_t, std::shared_ptr<ShmSegment>> shm_;  // by worker node id
  CmaPeers cma_;
  std::optional<ConsistencyGate> gate_;
  // Whether sparse tables are defined under the gate's controller and aggregator (OK, or why
  // not): checked when the policy is set or switched, not per request.
  Status tables_defined_;
  void PolicyChanged() {
    tables_defined_ = TablesDefinedUnder(gate_->consistency_spec(), gate_->aggregator_spec());
  }
  std::unique_ptr<DurableStore> durable_;
  std::unique_ptr<Replicator> replicator_;  // a primary's shipping to its backups
  bool standby_ = false;                    // a backup: applies records, serves no worker
  int32_t primary_ = -1;                    // a backup: the primary it follows ...
  int64_t epoch_ = 0;                       // ... at this epoch
  std::vector<int32_t> snapshots_owed_;     // backups announced before the shard map
  std::atomic<int64_t> snapshots_{0};       // a backup: partitions whose state it holds
  bool synced_reported_ = false;
  std::atomic<bool> broken_{false};  // a backup's owner could not apply a shipment
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  Status fatal_;  // set when the server cannot go on (its data dir does not fit the cluster)
  std::optional<proto::CutManifest> restore_;  // --restore_from's manifest
  // A whole-run checkpoint at cut.clock: requests of that clock or later wait in `deferred`
  // (in arrival order) until every owner has its part in hand (the network thread's written,
  // the apply threads' queued ahead of them), so it holds every update of the clocks before and
  // none after.
  struct PendingCut {
    uint64_t request_id = 0;
    proto::Cut cut;
    std::deque<Envelope> deferred;
    std::shared_ptr<CutJob> job;  // writing, once every live worker reached cut.clock
    std::chrono::steady_clock::time_point writing_since;
  };
  std::optional<PendingCut> cut_;
  struct Draining {
    proto::Header request;
    std::deque<Envelope> deferred;  // in arrival order
    std::shared_ptr<std::atomic<int>> owners_done = std::make_shared<std::atomic<int>>(0);
    bool said = false;  // DRAINED sent
  };
  std::optional<Draining> drain_;
  struct MoveOut {
    proto::Header request;          // the scheduler's MOVE
    std::set<int32_t> partitions;   // being moved
    std::deque<Envelope> deferred;  // their requests, in arrival order
    std::shared_ptr<Mover> mover;   // shared with the owners' shipping tasks
    bool said = false;              // MOVED sent
    std::chrono::steady_clock::time_point since;
  };
  std::optional<MoveOut> move_out_;
  std::optional<ShardMap> placement_;                // a map newer than map_ (live re-sharding)
  std::unordered_map<int32_t, int64_t> moved_away_;  // partition -> the epoch that moved it
  std::unordered_set<int32_t> moved_in_;             // partitions that arrived by a move
  bool stop_seen_ = false;  // Stopping(): the hand-over was asked for (or not needed)
  std::chrono::steady_clock::time_point stop_by_;
  // While a batch is served: its worker and the answers collected for it.
  struct Answers {
    std::string identity;
    Batch batch;
  };
  std::optional<Answers> answers_;
  int64_t max_clock_seen_ = -1;  // the furthest clock of any request served
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t pushes_ = 0, pulls_ = 0, errors_ = 0;
  std::unordered_map<std::string, int> errors_to_strangers_;  // by identity, see Reject
  ChunkAssembly chunks_;  // switch emulation: chunk sums until their push is whole
  bool shutdown_ = false;
};

}  // namespace hetps
