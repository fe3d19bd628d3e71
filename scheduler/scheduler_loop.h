// SchedulerLoop: the scheduler's event loop (one thread, one ROUTER socket): membership,
// barriers, the shard map, failure detection, federated rounds, checkpoints and the policy.
// SchedulerNode (scheduler.h) runs one. Its members are defined by concept:
//   scheduler_loop.cc       the loop: its state on disk, dispatch of messages, progress, shutdown
//   scheduler_joins.cc      who may say what (keys), registration, late workers, restarted
//                           servers, nodes leaving and dying
//   scheduler_shard_map.cc  the tensors the workers declare, the shard map built and checked
//   scheduler_policy.cc     live policy switches, straggler figures and hints to the servers
//   scheduler_virtual.cc    virtual time (--clock=virtual): federated requests and data-centre
//                           workers' turns released in virtual-time order
//
// Thread-safety: none; Run() owns it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "common/cluster_view.h"
#include "common/connection_guard.h"
#include "common/cut.h"
#include "common/message.h"
#include "common/routed_outbox.h"
#include "common/same_message.h"
#include "scheduler/barrier.h"
#include "scheduler/checkpoints.h"
#include "scheduler/cluster_stats.h"
#include "scheduler/fed_rounds.h"
#include "scheduler/http_status.h"
#include "scheduler/join_limiter.h"
#include "scheduler/layer_planner.h"
#include "scheduler/membership.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_store.h"
#include "scheduler/table_exports.h"
#include "scheduler/virtual_clock.h"

namespace hetps {

class SchedulerLoop {
 public:
  using Clock = std::chrono::steady_clock;

  SchedulerLoop(const SchedulerOptions& options, const std::atomic<bool>& stop)
      : options_(options),
        stop_(stop),
        members_(options.num_servers, options.num_workers,
                 options.max_workers > 0 ? options.max_workers : kMaxWorkerRanks,
                 options.num_aggregators),
        stats_(options.num_servers, options.num_workers, {.straggler = options.straggler}),
        checkpoints_({.dir = options.checkpoint_dir,
                      .every_clocks = options.checkpoint_every_clocks,
                      .keep = options.keep_checkpoints},
                     CheckpointActions()),
        fed_(options.fed, FedActions()),
        exports_(
            {.send = [this](int32_t server,
                            const proto::Header& h) { Reply(members_.ById(server)->identity, h); },
             .reply = [this](const Arrival& to, const proto::Header& h) { Reply(to.identity, h); },
             .live_servers = [this] { return members_.LiveServers(); }}),
        joins_(options.join_rate, options.join_burst),
        router_(ctx_, zmq::socket_type::router) {
    members_.set_replicas(options.replicas);
    members_.set_max_servers(options.max_servers);
    stats_.SetLayerPlanner(&layers_);
    if (options.fed.virtual_time) vclock_.emplace();
  }

  Status Run();

 private:
  // --data_dir: resumes the saved cluster (returns the endpoint to bind), or claims a new dir.
  StatusOr<std::string> OpenDataDir();
  // --resume_from: the checkpoint this run starts from.
  Status OpenResume();
  Checkpoints::Actions CheckpointActions();
  FedRounds::Actions FedActions();
  int LiveWorkers() const { return static_cast<int>(members_.LiveWorkers().size()); }
  // Saves what a restarted scheduler needs, before any node hears of the change.
  void Save();
  // With a data dir, what FedRounds sends waits in fed_outgoing_ until its state is saved:
  // saves it (when it changed) and sends them. Called once per turn of the loop.
  void CommitFed();
  // Sends a FedRounds message now (no data dir) or after the next CommitFed.
  void FedSend(const std::string& identity, proto::Header h) {
    if (!store_) return Reply(identity, std::move(h));
    fed_outgoing_.push_back({identity, std::move(h)});
  }
  void Handle(Envelope& env);
  void HandleMember(const Envelope& env, Member& member);
  void HandleRound(const Envelope& env, const Member& member);
  void DispatchRound(proto::MsgType type, const Arrival& arrival, const proto::FedRound& request);
  // Virtual time (scheduler_virtual.cc): a check-in or upload report waits in the virtual
  // clock; ReleaseVirtual hands FedRounds every request and deadline the clock may release,
  // in virtual-time order, while no close or commit waits for the servers.
  void HoldRound(const Arrival& arrival, const Member& member, const proto::Header& h);
  void DeclareProgress(const Envelope& env, const Member& member);  // ROUND_PROGRESS
  // A data-centre worker's turn (VIRTUAL_TURN): held in the virtual clock, granted when it is
  // the earliest the clock may release and no other turn is in flight; VIRTUAL_DONE ends it.
  void HoldTurn(const Envelope& env, const Member& member);
  void EndTurn(const Envelope& env, const Member& member);
  // Under virtual time, /api/status's "virtual" (JSON text; empty under wall time): the clock's
  // time, the requests it holds, the ranks it waits for and whose turn is in flight.
  std::string VirtualJson();
  void ReleaseVirtual();
  void TakeLateHolders();
  // The time FedRounds runs on: virtual under --clock=virtual, else the scheduler's seconds.
  double FedNow() const { return vclock_ ? vclock_->now() : Now(); }
  // Run's parts: binds the router at `bind` (secured as the options say), then serves until
  // the cluster is done or stopped.
  Status Bind(const std::string& bind);
  void Serve();
  void OnNodeError(Member& member, const proto::Header& h);
  // A node that is gone (declared dead, or retired after a hand-over): every part of the
  // scheduler forgets it, and a primary's rank fails over.
  void Depart(int32_t id);
  Status Authorize(const Envelope& env);
  // A worker registers in this scheduler's clock (wall or virtual) or not at all.
  Status SameClock(const proto::Header& registration) const;
  Status PrivateLayers(const std::string& layer_schedule) const;
  void HandleRegister(const Envelope& env);
  void HandleDeclare(const Envelope& env, const Member& m);
  void HandleLeave(const Envelope& env, const Member& m);
  void OnDead(int32_t id);
  // Live policy switch: fan SET_POLICY out to every server, answer the operator once all did.
  void StartPolicyChange(const Envelope& env);
  void OnPolicyAnswer(const Member& server, const proto::Header& h);
  void FinishPolicyChanges();
  void Progress();  // releases whatever can be released now
  void BuildShardMap(const std::vector<Arrival>& waiting);
  Status CheckAgainstMap(const proto::Header& declare) const;
  // Every message carries this scheduler's incarnation: a node that sees it change knows the
  // scheduler was restarted and asks again what it had not been answered.
  // A message to a live node that cannot take it yet (after a restart, before its connection
  // is back) is held and sent once it can.
  // The answer to a heartbeat; a worker's carries the layer-wise schedule.
  void ReplyHeartbeat(const std::string& identity, const proto::Header& h, bool worker) {
    proto::Header r = ReplyTo(h, proto::HEARTBEAT, kSchedulerId);
    if (worker) *r.mutable_layer_schedule() = layers_.Hint();
    Reply(identity, std::move(r));
  }
  void Reply(const std::string& identity, proto::Header h) {
    h.set_incarnation(incarnation_);
    outbox_.Send(identity, h, [&] {
      const Member* m = members_.ByIdentity(identity);
      return m != nullptr && m->state == Member::State::kAlive;
    });
  }
  void Broadcast(proto::Header h);
  void AdmitRestartedServer(const Envelope& env, const Member& m);
  // A worker joining the running cluster: every live server starts counting it, then it gets
  // the view with the clock it starts at.
  void AdmitLateWorker(const Member& m);
  void OnJoinAck(const Member& server, const proto::Header& h);
  void SendJoins();
  void FinishJoins();
  void AnnounceServerBack(const Member& m);
  // Backups (--replicas; scheduler_replicas.cc, docs/replication.md): a standby's admission,
  // the backup set sent to a rank's primary (and whom each backup follows), a backup saying it
  // follows its primary or holds every partition, and the promotion of a synced backup when its
  // primary dies.
  void AdmitStandby(const Envelope& env, const Member& m);
  void SendBackups(int32_t rank);
  void OnBackupSaid(Member& backup, const proto::Header& h);
  void FailOver(int32_t dead);
  Member* SyncedBackup(int32_t rank);  // a backup holding all of the rank at its epoch
  void Promote(Member& next, Member& old);
  void OnPromoted(const Member& m, const proto::Header& h);
  // Planned hand-overs (hetps ctl drain-server; scheduler_drain.cc): an operator's DRAIN of a
  // rank goes to its primary, whose DRAINED (every update on the backups) retires it and
  // promotes a synced backup; the operator hears once the backup serves, or why not.
  void StartDrain(const Envelope& env);
  void DrainByMoves(const Envelope& env);
  void OnDrained(Member& primary, const proto::Header& h);
  // The promoted backup serves: the drained primary is retired (it exits), the operator told.
  void RetireDrained(const Member& serving);
  // The backup promoted for a drain died or refused: the drained primary is the rank's primary
  // again and serves (RESUME). Whether `backup` was such a backup.
  bool CancelDrain(Member& backup);
  void Resume(const Member& primary);
  void FinishDrain(int32_t rank, const Status& s, const Member* serving = nullptr);
  void ExpireDrains();
  // Live re-sharding (hetps ctl move; scheduler_moves.cc): an operator's MOVE (what is refused:
  // CheckMove) goes to each source rank's server; every MOVED in, the map's next epoch is saved
  // and broadcast; a refusal, a death or the deadline calls it off (EndMove).
  Status CheckMovable() const;
  Status CheckMove(const proto::Move& move) const;
  void StartMove(const Envelope& env);
  void OnMoved(const Member& source, const proto::Header& h);
  void EndMove(const Status& s);
  void ExpireMove();
  void ResendMap(Member& m);
  struct PendingMove;
  void BeginMove(const std::map<int32_t, int32_t>& entries, const Arrival& requester,
                 int32_t retire = -1);
  // Elastic ranks (--max_servers; scheduler_moves.cc): a drain moves a rank's partitions off
  // (DrainMoves) and retires it (RetireRank); a server that joins past the ranks gets the grown
  // map (AdmitNewRank), then everyone does and partitions move to it (AnnounceNewRank,
  // RebalanceMoves).
  void RetireRank(const PendingMove& done);
  StatusOr<std::map<int32_t, int32_t>> DrainMoves(int32_t rank) const;
  std::map<int32_t, int32_t> RebalanceMoves(int32_t rank) const;
  void AdmitNewRank(const Envelope& env, Member& m);
  void AnnounceNewRank(Member& m);
  void MaybeRebalance();
  proto::Header ViewMessage(proto::MsgType type, bool alive_only) const;
  // NODE_DEAD / NODE_LEFT: a message of `type` about node `id`.
  static proto::Header AboutNode(proto::MsgType type, int32_t id) {
    proto::Header h;
    h.set_type(type);
    h.set_sender(kSchedulerId);
    h.set_node(id);
    return h;
  }
  void Shutdown(bool everyone);
  // Straggler flags and figures: recomputed, hinted to the servers, published over HTTP (every
  // 200 ms).
  void Observe();
  void SetFigures();
  void SendHints();
  double Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  const SchedulerOptions& options_;
  const std::atomic<bool>& stop_;
  Membership members_;
  ClusterStats stats_;
  LayerPlanner layers_;  // the layer-wise push schedule (--layer_schedule)
  std::unique_ptr<StatusHttp> http_;
  const Clock::time_point start_ = Clock::now();
  std::unique_ptr<SchedulerStore> store_;
  Checkpoints checkpoints_;
  FedRounds fed_;
  std::optional<VirtualClock> vclock_;    // --clock=virtual
  std::optional<double> stale_deadline_;  // a virtual deadline whose firing changed nothing
  std::optional<int32_t> turn_;           // the data-centre worker whose turn is in flight
  TableExports exports_;
  JoinLimiter joins_;
  int64_t joins_refused_ = 0;
  struct Outgoing {
    std::string identity;
    proto::Header header;
  };
  std::vector<Outgoing> fed_outgoing_;
  std::optional<proto::CutManifest> resume_;
  const uint64_t incarnation_ =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1;
  double last_observed_ = -1;
  std::vector<int32_t> hinted_stragglers_;
  int64_t hinted_quorum_ = -1;
  zmq::context_t ctx_{1};
  zmq::socket_t router_;
  std::optional<ZapHandler> zap_;         // auth.curve: admits keys to router_
  std::optional<ConnectionGuard> guard_;  // before router_ goes
  int64_t refused_ = 0;                   // messages Authorize refused
  RoutedOutbox outbox_{router_};
  std::string endpoint_;  // bound
  bool view_sent_ = false;
  std::set<int32_t> restoring_;        // restarted servers installing the shard map
  std::map<int32_t, int64_t> epochs_;  // per server rank, its primary's term (from 1)
  std::set<int32_t> promoting_;        // backups told to take their rank over
  struct Drain {
    Arrival requester;  // the operator
    int32_t primary = -1;
    int32_t promoted = -1;  // the backup told to take the rank over, once DRAINED
    double since = 0;
  };
  std::map<int32_t, Drain> drains_;  // by rank
  struct PendingMove {
    uint64_t id = 0;
    Arrival requester;                            // the operator (no identity: nobody)
    int32_t retire = -1;                          // a drained rank, retired once moved off
    std::map<int32_t, int32_t> entries;           // partition -> rank
    std::set<int32_t> sources;                    // server nodes yet to say MOVED
    std::set<std::pair<int32_t, int32_t>> nodes;  // (source, target) node ids
    double since = 0;
  };
  std::optional<PendingMove> move_;
  uint64_t next_move_ = 1;
  std::set<int32_t> growing_;  // servers of new ranks installing the grown map
  std::set<int32_t> to_fill_;  // ranks that joined and wait for partitions to move to them
  struct Joining {
    std::string identity;
    proto::NodeInfo info;
    double sent_at = -1;        // when WORKER_JOINED last went to the waiting servers
    std::set<int32_t> waiting;  // live servers yet to count the worker
    int64_t clock = 0;          // the highest clock a server starts it at
  };
  std::map<int32_t, Joining> joining_;  // late workers by id
  bool done_ = false;
  Barrier barrier_;
  Barrier declare_;
  std::map<std::string, TensorSpec> declared_;
  std::optional<ShardMap> map_;
  std::set<int32_t> pending_acks_;
  std::vector<Arrival> waiting_for_map_;
  struct PolicyChange {
    Arrival requester;
    std::set<int32_t> waiting;  // servers yet to answer
    Status status;              // the first refusal, if any
    proto::Policy policy;
  };
  std::optional<proto::Policy> policy_;              // what the servers run
  std::map<uint64_t, PolicyChange> policy_changes_;  // by the request id sent to the servers
  uint64_t next_policy_id_ = 1;
};

}  // namespace hetps
