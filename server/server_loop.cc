// ServerLoop: set-up, the loop, reports and the scheduler's control messages (server_loop.h).
#include "server/server_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/table/table_export.h"
#include "server/table/table_serving.h"

namespace hetps {

Status ServerLoop::Setup() {
  if (Status s = ValidateServerOptions(options_); !s.ok()) return s;
  auto opt = MakeOptimizer(options_.optimizer);
  if (!opt.ok()) return opt.status();
  optimizer_ = std::move(*opt);
  auto init = Initializer::Make(options_.init);
  if (!init.ok()) return init.status();
  initializer_ = std::move(*init);
  aggregator_ = *Aggregators().Parse(options_.aggregator);  // validated above
  gate_.emplace(
      *Controllers().Parse(options_.consistency), *aggregator_,
      ConsistencyGate::Actions{
          [this](const std::string& identity, const proto::Header& h) { Reply(identity, h); },
          [this](DataRequest&& request) { Serve(std::move(request)); },
          [this](const RoundSpec& round) { ApplyRound(round); }, [this] { return Now(); }});
  PolicyChanged();

  router_.emplace(ctx_, zmq::socket_type::router);
  router_->set(zmq::sockopt::linger, 0);
  // At most 64 messages from one peer wait to be read: beyond, ZeroMQ stops reading that
  // connection (TCP pushes back on the sender; nothing is dropped), so a peer that sends
  // faster than the server reads cannot fill its memory with queued frames.
  router_->set(zmq::sockopt::rcvhwm, 64);
  router_->set(zmq::sockopt::sndhwm, 0);
  router_->set(zmq::sockopt::maxmsgsize, MaxFrameBytes(options_.max_partition_bytes));
  guard_.emplace(*router_, options_.max_connections_per_address, "server");
  if (Status s = CheckListenEndpoint(options_.bind, options_.auth, options_.insecure); !s.ok()) {
    return s;
  }
  if (options_.auth.curve) {
    zap_.emplace(
        ctx_, options_.auth.allow,
        std::map<std::string, std::set<KeyRole>>{{"server", {KeyRole::kWorker, KeyRole::kServer}}});
    options_.auth.SecureServer(*router_, "server");
  }
  try {
    router_->bind(options_.bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", options_.bind, e.what()));
  }
  std::string endpoint = BoundEndpoint(*router_);
  std::string address = options_.advertise.empty() ? endpoint : options_.advertise;
  if (address.ends_with(":*")) {  // the host to dial, at the port bound
    address.replace(address.size() - 1, 1, endpoint.substr(endpoint.rfind(':') + 1));
  }
  if (address.find("0.0.0.0") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "bound to {}: pass --advertise=tcp://<reachable host>:<port> for workers to dial",
        endpoint));
  }
  apply_threads_.emplace(ctx_, options_.threads);
  link_ = std::make_unique<SchedulerLink>(control_ctx_, options_.scheduler, proto::SERVER, address,
                                          options_.heartbeat_interval_ms, options_.auth);
  if (options_.standby) link_->registration().mutable_replica()->set_standby(true);
  standby_ = options_.standby;
  link_->registration().mutable_policy()->set_consistency(gate_->consistency());
  link_->registration().mutable_policy()->set_scheduler_rounds(gate_->scheduler_rounds());
  link_->registration().mutable_policy()->set_synchronous(gate_->synchronous());
  link_->registration().mutable_policy()->set_summed_pushes(gate_->summed_pushes());
  // Reads may be shared unless the aggregator keeps what each worker read.
  link_->registration().mutable_policy()->set_shared_reads(
      !Aggregators().EntryFor(aggregator_->name()).make(*aggregator_, *optimizer_)->tracks_reads());
  if (Status s = OpenDataDir(); !s.ok()) return s;
  spdlog::info("listening on {} (advertised {}; {}), {} apply threads, optimizer {} ({})", endpoint,
               address, options_.auth.Describe(), options_.threads,
               Optimizers().Parse(options_.optimizer)->Full(), SimdPathName(ActiveSimdPath()));
  return Status();
}

Status ServerLoop::Run() {
  if (Status s = Setup(); !s.ok()) return s;
  if (Status s = link_->Join(stop_, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("server", link_->id());
  if (link_->admitted_standby() && !standby_) {
    // Its rank failed over while it was away: it backs a rank up, in memory, as a standby does
    // (its data dir, behind the rank's new primary, is left as it is).
    spdlog::warn("server rank {} is served by another server now: joining as a backup of rank {}",
                 durable_ && durable_->meta() ? durable_->meta()->server_rank() : -1,
                 link_->rank());
    standby_ = true;
    durable_.reset();
  }
  link_->SetReporter([this](proto::Header& h) { FillReport(h); });
  state_.self = link_->id();
  state_.cma = &cma_;
  replicator_ = std::make_unique<Replicator>(ctx_, ApplyThreads::kRepliesEndpoint, link_->id(),
                                             &options_.auth);
  state_.replicator = replicator_.get();
  std::vector<int32_t> workers;
  for (const proto::NodeInfo& w : link_->view().workers()) workers.push_back(w.id());
  gate_->Start(workers, restore_ ? restore_->clock() : 0);
  // Restarted on its data dir into a running cluster, it takes the cluster's consistency (an
  // operator may have switched it since this server's flags were written); resumed from a
  // checkpoint, the consistency the run had then.
  const std::string& cluster_policy =
      restore_ ? restore_->policy().consistency() : link_->view().proto().policy().consistency();
  if (((durable_ && durable_->meta()) || restore_) && !cluster_policy.empty() &&
      cluster_policy != gate_->consistency()) {
    if (Status s = gate_->Switch(cluster_policy); !s.ok()) {
      spdlog::warn("the cluster runs consistency '{}', which this server refuses: {}",
                   cluster_policy, s.ToString());
    }
    PolicyChanged();
  }
  spdlog::info("consistency {}, aggregator {}", gate_->consistency(), aggregator_->Full());
  const std::string joined =
      fmt::format("joined as server {}: {} servers, {} workers", link_->rank(),
                  link_->view().num_servers(), link_->view().num_workers());
  spdlog::info("{}", joined);
  if (options_.on_joined) options_.on_joined(joined);

  while (!shutdown_ && fatal_.ok() && !Stopping()) {
    Poll();
    MaybeReportSynced();
    MaybeFinishDrain();
    ProgressMove();
    if (replicator_->fenced()) fatal_ = Status::Aborted(replicator_->fenced_reason());
    ProgressCut();
    MaybeCheckpoint();
    if (link_->SchedulerLost()) {
      apply_threads_->Stop();
      CheckpointOwned(state_, 0);
      return Status::Unavailable(fmt::format("no word from the scheduler for {} ms; stopping",
                                             link_->view().proto().heartbeat_timeout_ms()));
    }
  }
  apply_threads_->Stop();  // each apply thread checkpoints its partitions as it stops
  if (map_) CheckpointOwned(state_, 0);
  if (!fatal_.ok()) return fatal_;
  spdlog::info("stopped: {} pushes, {} pulls served, {} requests rejected, {} late pushes dropped",
               pushes_, pulls_, errors_, gate_->dropped());
  return Status();
}

void ServerLoop::Poll() {
  std::vector<zmq::pollitem_t> items = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                        {apply_threads_->replies().handle(), 0, ZMQ_POLLIN, 0},
                                        {link_->socket().handle(), 0, ZMQ_POLLIN, 0}};
  if (move_out_) move_out_->mover->AddPollItems(items);  // the targets' acknowledgements
  zmq::poll(items, move_out_ ? std::chrono::milliseconds(5) : std::chrono::milliseconds(100));
  link_->MaybeHeartbeat();
  if (map_ && !drain_) gate_->Tick();  // deadlines (semi_async rounds)
  // Replies first: they free memory and unblock workers.
  for (int n = 0; n < 1024 && (items[1].revents & ZMQ_POLLIN); ++n) {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(apply_threads_->replies(), std::back_inserter(frames),
                             zmq::recv_flags::dontwait))
      break;
    zmq::send_multipart(*router_, frames);
  }
  for (int n = 0; n < 1024 && (items[0].revents & ZMQ_POLLIN); ++n) {
    auto env = Receive(*router_, zmq::recv_flags::dontwait, /*routed=*/true);
    if (!env) break;
    if (IsBatch(*env)) {
      HandleBatch(*env);
    } else {
      HandleWorker(*env);
    }
  }
  while (items[2].revents & ZMQ_POLLIN) {
    auto env = Receive(link_->socket(), zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) break;
    link_->Heard();
    // A scheduler restarted on its data dir learns again what this backup follows and holds.
    // A drain it asked for is forgotten: this server serves again.
    if (env->status.ok() && link_->SchedulerRestarted(env->message.header)) {
      ReportReplica();
      OnResume();
      // A move it had not heard of as done is forgotten; one it has, its map settles.
      if (move_out_ && !move_out_->said) EndMove(Status::Aborted("the scheduler restarted"));
    }
    if (env->status.ok()) HandleControl(*env);
  }
}

void ServerLoop::FillReport(proto::Header& h) const {
  proto::ServerReport& r = *h.mutable_server_report();
  r.set_pushes(pushes_);
  r.set_pulls(pulls_);
  r.set_errors(errors_);
  r.set_connections_refused(guard_ ? guard_->refused() : 0);
  r.set_parked_pulls(gate_->parked_reads());
  r.set_parked_clocks(gate_->parked_clocks());
  r.set_consistency(gate_->consistency());
  if (!map_) return;
  r.set_partitions(state_.store->num_partitions());
  r.set_bytes_held(state_.store->bytes());
  ReportTables(*map_, *state_.store, r);
  for (const auto& [layer, c] : state_.layers) {
    proto::LayerReport& l = *r.add_layers();
    l.set_layer(layer);
    l.set_pushes(c->pushes.load(std::memory_order_relaxed));
    l.set_bytes(c->bytes.load(std::memory_order_relaxed));
    l.set_staleness_sum(c->staleness_sum.load(std::memory_order_relaxed));
    l.set_max_staleness(c->max_staleness.load(std::memory_order_relaxed));
  }
}

void ServerLoop::HandleControl(Envelope& env) {
  const proto::Header& h = env.message.header;
  switch (h.type()) {
    case proto::SHARD_MAP: {
      if (map_) return OnMapUpdate(h.shard_map());  // a later epoch (live re-sharding)
      Status s = InstallShardMap(h.shard_map());
      proto::Header ack =
          s.ok() ? ReplyTo(h, proto::SHARD_MAP_ACK, link_->id()) : ErrorReply(h, s, link_->id());
      if (!s.ok()) spdlog::error("shard map rejected: {}", s.ToString());
      link_->Send(ack);
      break;
    }
    case proto::NODE_DEAD: {
      dead_.insert(h.node());
      chunks_.Forget(h.node());
      shm_.erase(h.node());
      cma_.Forget(h.node());
      const proto::NodeInfo* node = link_->view().Node(h.node());
      const bool worker = node != nullptr && node->role() == proto::WORKER;
      spdlog::warn("{} {} declared dead by the scheduler", worker ? "worker" : "node", h.node());
      if (worker) gate_->RemoveWorker(h.node(), "is dead");
      break;
    }
    case proto::NODE_LEFT:
      shm_.erase(h.node());
      cma_.Forget(h.node());
      gate_->RemoveWorker(h.node(), "finished");
      break;
    case proto::WORKER_JOINED:
      return OnWorkerJoined(h);
    case proto::SET_POLICY: {
      Status s = gate_->Switch(h.policy().consistency());
      PolicyChanged();
      if (!s.ok())
        spdlog::warn("consistency '{}' refused: {}", h.policy().consistency(), s.ToString());
      link_->Send(s.ok() ? ReplyTo(h, proto::POLICY_ACK, link_->id())
                         : ErrorReply(h, s, link_->id()));
      break;
    }
    case proto::CHECKPOINT:
      return OnCheckpoint(h);
    case proto::EXPORT:
      return OnExport(h);
    case proto::POLICY_HINT:
      gate_->OnHint({h.stragglers().begin(), h.stragglers().end()}, h.quorum());
      break;
    case proto::ROUND_CLOSE: {
      // Handed to the partition owners before anything that arrives after it (FIFO), so a
      // pull of the next round reads the model with this one applied.
      std::vector<RoundSpec::Late> late;
      for (const proto::LateUpload& l : h.fed_round().late()) {
        if (!(l.factor() > 0 && l.factor() <= 1) || l.round() >= h.fed_round().round()) {
          spdlog::warn(
              "round {} closes with a malformed late upload (worker {}, round {}, "
              "factor {}); it is not applied",
              h.fed_round().round(), l.worker(), l.round(), l.factor());
          continue;
        }
        late.push_back({l.worker(), l.round(), l.factor()});
      }
      std::vector<int32_t> kept(h.fed_round().workers().begin(), h.fed_round().workers().end());
      std::shared_ptr<const proto::SecureClose> secure;
      if (h.fed_round().has_secure()) {
        if (Status s = CheckSecureClose(h.fed_round().secure()); s.ok()) {
          secure = std::make_shared<proto::SecureClose>(h.fed_round().secure());
        } else {
          spdlog::warn("secure round {} is dropped: {}", h.fed_round().round(), s.message());
          kept.clear();
        }
      }
      gate_->OnRoundClosed(h.fed_round().round(), kept,
                           {h.fed_round().tasks().begin(), h.fed_round().tasks().end()}, late,
                           h.fed_round().late_rounds(), std::move(secure),
                           h.fed_round().has_dp_noise_std() ? h.fed_round().dp_noise_std() : -1);
      proto::Header ack = ReplyTo(h, proto::ROUND_CLOSED, link_->id());
      *ack.mutable_fed_round() = h.fed_round();
      link_->Send(ack);
      break;
    }
    case proto::BACKUPS:
      return OnBackups(h);
    case proto::PROMOTE:
      return OnPromote(h);
    case proto::DRAIN:
      return OnDrain(h);
    case proto::MOVE:
      return OnMove(h);
    case proto::RESUME:
      if (stop_seen_) shutdown_ = true;  // stopping anyway: the rank stays here
      return OnResume();
    case proto::SERVER_BACK:  // a server restarted, or one that grew the cluster: its address
      for (const proto::NodeInfo& n : h.view().nodes()) {
        if (n.id() == h.node() && link_->view().Node(n.id()) == nullptr) link_->view().Add(n);
      }
      break;
    case proto::SHUTDOWN:
      spdlog::info("shutdown requested by the scheduler");
      shutdown_ = true;
      break;
    case proto::HEARTBEAT:
      break;
    case proto::ERROR:
      if (h.error() == StatusCode::kUnregistered) {
        // Declared dead while alive (it stalled past the heartbeat timeout): the cluster has
        // stopped routing to it, so it stops too; restarted on its data dir it takes its rank
        // over again (hetps launch --restart does that).
        fatal_ = Status::Aborted(fmt::format(
            "the scheduler declared this server dead ({}); stopping so that a restart takes its "
            "rank over",
            h.error_message()));
        break;
      }
      spdlog::warn("the scheduler reported: {}", StatusOf(h).ToString());
      if (stop_seen_ && !drain_) shutdown_ = true;  // the hand-over it asked for was refused
      break;
    default:
      spdlog::debug("ignoring control message {}", proto::MsgType_Name(h.type()));
  }
}

void ServerLoop::OnExport(const proto::Header& h) {
  const proto::TableExport& request = h.table_export();
  if (request.abort()) {
    if (map_) CallOffExport(*map_, *state_.store, request.table());
    spdlog::warn("export of table '{}' called off; its next export is full", request.table());
    return;
  }
  StatusOr<proto::TableExport> done =
      map_ ? ExportTable(*map_, *state_.store, link_->rank(), request)
           : StatusOr<proto::TableExport>(Status::Unavailable("no shard map installed yet"));
  proto::Header r;
  if (done.ok()) {
    r = ReplyTo(h, proto::EXPORT_DONE, link_->id());
    *r.mutable_table_export() = std::move(*done);
  } else {
    spdlog::error("export of table '{}': {}", request.table(), done.status().ToString());
    r = ErrorReply(h, done.status(), link_->id());
    r.mutable_table_export()->set_table(request.table());
  }
  link_->Send(r);
}

// A worker joined the running cluster: its requests are accepted and the controller counts it
// from the clock it reports back (the scheduler gives the worker the highest of them).
void ServerLoop::OnWorkerJoined(const proto::Header& h) {
  if (h.view().nodes_size() != 1 || h.view().nodes(0).role() != proto::WORKER) {
    spdlog::warn("ignoring a malformed WORKER_JOINED");
    return;
  }
  const proto::NodeInfo& worker = h.view().nodes(0);
  if (link_->view().Node(worker.id()) == nullptr) link_->view().Add(worker);  // else a repeat
  proto::Header ack = ReplyTo(h, proto::WORKER_JOINED_ACK, link_->id());
  ack.set_node(worker.id());
  ack.set_clock(gate_->AddWorker(worker.id()));
  link_->Send(ack);
}

Status ServerLoop::InstallShardMap(const proto::ShardMap& proto_map) {
  if (map_) return Status::FailedPrecondition("a shard map is already installed");
  auto map = ShardMapFromProto(proto_map);
  if (!map.ok()) return map.status();
  for (const Partition& p : map->partitions()) {
    const int64_t bytes = p.length * static_cast<int64_t>(sizeof(float));
    if (p.server_rank == link_->rank() && bytes > options_.max_partition_bytes) {
      // It could never read a push of that partition: it stops with the reason.
      fatal_ = Status::FailedPrecondition(fmt::format(
          "partition {} holds {} bytes, more than --max_partition_bytes={} (the largest frame "
          "this server reads): raise it, or lower the scheduler's --partition_bytes",
          p.id, bytes, options_.max_partition_bytes));
      return fatal_;
    }
  }
  map_ = std::move(*map);
  int64_t owned = 0;
  for (const Partition& p : map_->partitions()) owned += p.server_rank == link_->rank();
  // A worker waits on at most one read per partition and a clock at a time; room for 4 of each.
  gate_->SetParkedLimit(std::max<int64_t>(4096, 4 * owned));
  state_.optimizer = std::move(optimizer_);
  state_.map = &*map_;
  state_.codecs = &codecs_;
  state_.store = std::make_unique<PartitionStore>(*map_, link_->rank(), *state_.optimizer,
                                                  *initializer_, &*aggregator_);
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank != link_->rank()) continue;
    auto& slot = state_.layers[map_->tensors()[p.tensor_id].layer];
    if (!slot) slot = std::make_unique<ServingState::LayerCounters>();
  }
  // A partition that moves in later finds its layer's counters (the keys are fixed now).
  for (const TensorSpec& t : map_->tensors()) {
    if (!t.is_table() && !state_.layers.contains(t.layer)) {
      state_.layers[t.layer] = std::make_unique<ServingState::LayerCounters>();
    }
  }
  state_.owned.assign(1 + options_.threads, {});
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank == link_->rank()) state_.owned[Owner(p)].push_back(p.id);
  }
  if (durable_) {
    durable_->Prepare(map_->partitions().size());
    state_.durable = durable_.get();
    state_.checkpoint_interval_ms = options_.checkpoint_interval_ms;
    if (Status s = RestoreShards(); !s.ok()) {
      fatal_ = s;                // this server cannot serve this cluster: it stops with the reason
      state_.durable = nullptr;  // and writes nothing into a data dir that is not this model's
      return s;
    }
  }
  if (restore_) {
    if (Status s = RestoreCut(); !s.ok()) {
      fatal_ = s;
      state_.durable = nullptr;
      return s;
    }
  }
  apply_threads_->Start(state_);
  if (!snapshots_owed_.empty()) ShipSnapshots(std::exchange(snapshots_owed_, {}));
  spdlog::info("holding {} partitions, {:.1f} MiB ({} tensors in the map)",
               state_.store->num_partitions(), state_.store->bytes() / 1048576.0,
               map_->tensors().size());
  return Status();
}

}  // namespace hetps
