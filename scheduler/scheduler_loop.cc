// SchedulerLoop: the loop itself (scheduler_loop.h).
#include "scheduler/scheduler_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

namespace hetps {

namespace {

Status WriteEndpointFile(const std::string& path, const std::string& endpoint) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << endpoint << "\n";
    if (!out) return Status::InvalidArgument(fmt::format("cannot write {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::InvalidArgument(fmt::format("cannot rename {} to {}", tmp, path));
  }
  return Status();
}

}  // namespace

StatusOr<std::string> SchedulerLoop::OpenDataDir() {
  if (options_.data_dir.empty()) return options_.bind;
  auto store = SchedulerStore::Open(options_.data_dir);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  if (!store_->state()) {
    Save();
    return options_.bind;
  }
  const proto::SchedulerState& state = *store_->state();
  if (resume_) {
    return Status::FailedPrecondition(fmt::format(
        "scheduler data dir {} already holds a cluster; resuming from checkpoint {} needs an "
        "empty one",
        options_.data_dir, options_.resume_from));
  }
  if (state.num_servers() != options_.num_servers || state.num_workers() != options_.num_workers) {
    return Status::FailedPrecondition(fmt::format(
        "scheduler data dir {} holds a cluster of {} servers and {} workers; this scheduler was "
        "started for {} and {}",
        options_.data_dir, state.num_servers(), state.num_workers(), options_.num_servers,
        options_.num_workers));
  }
  const auto now = Clock::now();
  if (Status s = members_.Restore({state.members().begin(), state.members().end()}, now); !s.ok()) {
    return Status(s.code(),
                  fmt::format("scheduler data dir {}: {}", options_.data_dir, s.message()));
  }
  for (const Member& m : members_.members()) {
    if (!m.superseded) stats_.OnJoin(m.info, Now());
  }
  view_sent_ = state.formed();
  if (state.has_shard_map()) {
    auto map = ShardMapFromProto(state.shard_map());
    if (!map.ok()) return map.status();
    map_ = std::move(*map);
    layers_.SetShape(state.shard_map());
  }
  if (!state.policy().consistency().empty()) policy_ = state.policy();
  if (!state.layer_schedule().empty()) {
    if (Status s = layers_.Set(state.layer_schedule()); !s.ok()) {
      return Status(s.code(), fmt::format("scheduler data dir {}: layer schedule: {}",
                                          options_.data_dir, s.message()));
    }
  }
  if (store_->fed()) {
    if (Status s = fed_.Restore(*store_->fed(), Now()); !s.ok()) {
      return Status(s.code(),
                    fmt::format("scheduler data dir {}: {}", options_.data_dir, s.message()));
    }
    fed_.Resume(Now());  // sent by the first CommitFed, once the saved state is the current one
  }
  spdlog::info("resumed the cluster saved in {}: {} nodes ({} alive when saved), {}",
               options_.data_dir, state.members_size(), members_.Alive().size(),
               map_ ? "shard map built" : "no shard map yet");
  // Nodes reconnect to the address they know: a wildcard port binds the saved one again.
  const bool any_port = options_.bind.ends_with(":*") || options_.bind.ends_with(":0");
  return any_port && !state.endpoint().empty() ? state.endpoint() : options_.bind;
}

Status SchedulerLoop::OpenResume() {
  if (options_.resume_from.empty()) return Status();
  auto manifest = ReadManifest(options_.resume_from);
  if (!manifest.ok()) return manifest.status();
  if (manifest->num_servers() != options_.num_servers) {
    return Status::FailedPrecondition(
        fmt::format("checkpoint {} was taken on {} servers; this scheduler was started for {}",
                    options_.resume_from, manifest->num_servers(), options_.num_servers));
  }
  if (manifest->num_workers() != options_.num_workers) {
    spdlog::warn(
        "checkpoint {} was taken with {} workers, this run starts {}: the training data "
        "is split differently from here on",
        options_.resume_from, manifest->num_workers(), options_.num_workers);
  }
  resume_ = std::move(*manifest);
  if (!resume_->policy().consistency().empty()) policy_ = resume_->policy();
  spdlog::info("resuming from checkpoint {}: workers start at clock {}", options_.resume_from,
               resume_->clock());
  return Status();
}

FedRounds::Actions SchedulerLoop::FedActions() {
  auto answer = [this](proto::MsgType type) {
    return [this, type](const Arrival& to, const proto::FedRound& r) {
      proto::Header h;
      h.set_type(type);
      h.set_sender(kSchedulerId);
      h.set_request_id(to.request_id);
      *h.mutable_fed_round() = r;
      if (vclock_) {
        h.mutable_fed_round()->set_virtual_time(vclock_->now());
        vclock_->Answered(to.worker, r.finished());
      }
      FedSend(to.identity, h);
    };
  };
  return {.answer_checkin = answer(proto::ROUND_TASK),
          .answer_upload = answer(proto::ROUND_UPLOADED),
          .answer_watch = answer(proto::ROUND_WATCH),
          .close =
              [this](const proto::FedRound& r) {
                proto::Header h;
                h.set_type(proto::ROUND_CLOSE);
                h.set_sender(kSchedulerId);
                *h.mutable_fed_round() = r;
                for (int32_t id : members_.LiveServers()) FedSend(members_.ById(id)->identity, h);
              },
          .live_servers = [this] { return members_.LiveServers(); },
          .rank_of =
              [this](int32_t id) {
                const Member* m = members_.ById(id);
                return m != nullptr ? m->info.rank() : -1;
              },
          .answer_secagg =
              [this](const Arrival& to, const proto::SecAgg& s) {
                proto::Header h;
                h.set_type(proto::SECAGG);
                h.set_sender(kSchedulerId);
                h.set_request_id(to.request_id);
                *h.mutable_secagg() = s;
                FedSend(to.identity, h);
              },
          .refuse =
              [this](const Arrival& to, const Status& s) {
                proto::Header request;
                request.set_request_id(to.request_id);
                FedSend(to.identity, ErrorReply(request, s, kSchedulerId));
              }};
}

Checkpoints::Actions SchedulerLoop::CheckpointActions() {
  return {.send = [this](int32_t server,
                         const proto::Header& h) { Reply(members_.ById(server)->identity, h); },
          .reply = [this](const Arrival& to, const proto::Header& h) { Reply(to.identity, h); },
          .live_servers = [this] { return members_.LiveServers(); },
          .describe =
              [this] {
                proto::CutManifest m;
                m.set_num_servers(options_.num_servers);
                m.set_num_workers(options_.num_workers);
                if (map_) *m.mutable_shard_map() = ToProto(*map_);
                if (policy_) *m.mutable_policy() = *policy_;
                return m;
              },
          .completed =
              [this](const proto::Cut& cut) {
                stats_.OnCheckpoint(cut.clock(), cut.dir(), cut.bytes(), cut.seconds(), Now());
              }};
}

void SchedulerLoop::Save() {
  if (!store_) return;
  proto::SchedulerState state;
  state.set_endpoint(endpoint_);
  state.set_num_servers(options_.num_servers);
  state.set_num_workers(options_.num_workers);
  for (proto::SchedulerMember& m : members_.Save()) *state.add_members() = std::move(m);
  state.set_formed(view_sent_);
  if (map_) *state.mutable_shard_map() = ToProto(*map_);
  if (policy_) *state.mutable_policy() = *policy_;
  state.set_layer_schedule(layers_.spec());
  if (Status s = store_->Save(state); !s.ok()) spdlog::error("{}", s.ToString());
}

void SchedulerLoop::CommitFed() {
  if (!store_) return;
  if (Status s = store_->SaveFed(fed_.Save(Now())); !s.ok()) {
    // Sent all the same: holding the cluster up would not make the disk work again.
    spdlog::error("{}; a restart now would repeat what follows", s.ToString());
  }
  for (Outgoing& o : fed_outgoing_) Reply(o.identity, std::move(o.header));
  fed_outgoing_.clear();
}

Status SchedulerLoop::Bind(const std::string& bind) {
  router_.set(zmq::sockopt::linger, 2000);  // let SHUTDOWN reach the nodes on exit
  // Every message to the scheduler is a header (the largest, a declaration of the model's
  // tensors, holds about 50 bytes per tensor): a larger frame closes its connection unread.
  router_.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
  guard_.emplace(router_, options_.max_connections_per_address, "scheduler");
  if (Status s = CheckListenEndpoint(bind, options_.auth, options_.insecure); !s.ok()) return s;
  if (options_.auth.curve) {
    zap_.emplace(
        ctx_, options_.auth.allow,
        std::map<std::string, std::set<KeyRole>>{
            {"scheduler",
             {KeyRole::kWorker, KeyRole::kServer, KeyRole::kOperator, KeyRole::kScheduler}}});
    options_.auth.SecureServer(router_, "scheduler");
  }
  try {
    router_.bind(bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", bind, e.what()));
  }
  endpoint_ = BoundEndpoint(router_);
  return Status();
}

Status SchedulerLoop::Run() {
  if (Status s = ValidateSchedulerOptions(options_); !s.ok()) return s;
  if (Status s = layers_.Set(options_.layer_schedule); !s.ok()) return s;
  if (Status s = OpenResume(); !s.ok()) return s;
  auto bind = OpenDataDir();
  if (!bind.ok()) return bind.status();
  if (Status s = Bind(*bind); !s.ok()) return s;
  const std::string endpoint = endpoint_;
  Save();
  if (!options_.endpoint_file.empty()) {
    if (Status s = WriteEndpointFile(options_.endpoint_file, endpoint); !s.ok()) return s;
  }
  if (view_sent_) {
    spdlog::info("listening on {} ({}); the nodes reconnect to the resumed cluster", endpoint,
                 options_.auth.Describe());
  } else {
    spdlog::info("listening on {} ({}); waiting for {} servers and {} workers", endpoint,
                 options_.auth.Describe(), options_.num_servers, options_.num_workers);
  }
  if (options_.on_listening) options_.on_listening(endpoint);
  if (options_.http_port >= 0) {
    http_ = std::make_unique<StatusHttp>(
        options_.http_host, options_.http_port,
        options_.dashboard_dir.empty() ? DefaultDashboardDir() : options_.dashboard_dir);
    if (Status s = http_->Start(); !s.ok()) return s;
  }
  Serve();
  return Status();
}

void SchedulerLoop::Serve() {
  const auto timeout = std::chrono::milliseconds(options_.heartbeat_timeout_ms);
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  while (!done_) {
    if (stop_.load()) {
      Shutdown(/*everyone=*/true);
      break;
    }
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    for (int n = 0; n < 1024 && (item.revents & ZMQ_POLLIN); ++n) {
      auto env = Receive(router_, zmq::recv_flags::dontwait, /*routed=*/true);
      if (!env) break;
      Handle(*env);
    }
    for (int32_t id : members_.ExpireSilent(Clock::now(), timeout)) OnDead(id);
    ExpireDrains();
    ExpireMove();
    outbox_.Flush();
    if (Now() - last_observed_ >= 0.2) Observe();
    SendJoins();
    checkpoints_.Tick(stats_.MaxClock(),
                      map_ && pending_acks_.empty() && !members_.AllWorkersDone(), Now());
    if (vclock_) {
      ReleaseVirtual();
    } else {
      fed_.Tick(LiveWorkers(), Now());
    }
    CommitFed();
  }
}

void SchedulerLoop::Handle(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (!env.status.ok()) {
    spdlog::warn("malformed message from {}: {}", env.identity, env.status.ToString());
    Reply(env.identity, ErrorReply(h, env.status, kSchedulerId));
    return;
  }
  if (Status s = Authorize(env); !s.ok()) {
    const std::optional<CurveKey> key = options_.auth.allow.Find(env.peer);
    if (++refused_ <= 20 || refused_ % 1000 == 0) {  // a keyed peer cannot flood the log
      spdlog::warn("refused {} from key '{}' ({} refused so far): {}",
                   proto::MsgType_Name(h.type()), key ? key->name : env.peer, refused_,
                   s.message());
    }
    Reply(env.identity, ErrorReply(h, s, kSchedulerId));
    return;
  }
  if (h.type() == proto::REGISTER) {
    HandleRegister(env);
    return;
  }
  if (h.type() == proto::SET_POLICY) {  // from an operator, who is not a node
    StartPolicyChange(env);
    return;
  }
  if (h.type() == proto::CHECKPOINT) {  // likewise
    return checkpoints_.Request({-1, h.request_id(), env.identity}, Now());
  }
  if (h.type() == proto::EXPORT) {  // likewise
    return exports_.Request({-1, h.request_id(), env.identity}, h.table_export(),
                            map_ ? &*map_ : nullptr, Now());
  }
  if (h.type() == proto::DRAIN) return StartDrain(env);  // likewise
  if (h.type() == proto::MOVE) return StartMove(env);    // likewise
  if (h.type() == proto::STATUS) {  // likewise; as of the last Observe(), at most 200 ms ago
    proto::Header r = ReplyTo(h, proto::STATUS, kSchedulerId);
    SetFigures();
    r.set_status_json(stats_.StatusJson(Now()));
    return Reply(env.identity, r);
  }
  Member* m = members_.Touch(env.identity, Clock::now());
  if (m == nullptr || m->state == Member::State::kDead) {
    spdlog::debug("{} from unknown or dead {}", proto::MsgType_Name(h.type()), env.identity);
    Status s = Status::Unregistered(m == nullptr ? "register first"
                                                 : "this node was declared dead; restart it");
    Reply(env.identity, ErrorReply(h, s, kSchedulerId));
    return;
  }
  stats_.OnHeard(m->info.id(), Now());
  HandleMember(env, *m);
}

// A message from a registered, live node.
void SchedulerLoop::HandleMember(const Envelope& env, Member& member) {
  const proto::Header& h = env.message.header;
  Member* m = &member;
  const bool worker = m->info.role() == proto::WORKER;
  switch (h.type()) {
    case proto::HEARTBEAT:
      ResendMap(*m);
      if (worker && h.has_worker_report()) {
        stats_.OnWorkerReport(m->info.id(), h.worker_report(), Now());
        layers_.OnWorkerReport(m->info.id(), h.worker_report());
      } else if (!worker && h.has_server_report()) {
        stats_.OnServerReport(m->info.id(), h.server_report(), Now());
      } else if (h.has_aggregator_report() && m->info.role() == proto::AGGREGATOR) {
        stats_.OnAggregatorReport(m->info.id(), h.aggregator_report(), Now());
      }
      return ReplyHeartbeat(env.identity, h, worker);
    case proto::DECLARE_TENSORS:
      if (worker) return HandleDeclare(env, *m);
      break;
    case proto::BARRIER:
      if (worker) {
        barrier_.Arrive({m->info.id(), h.request_id(), env.identity});
        return Progress();
      }
      break;
    case proto::LEAVE:
      if (worker) return HandleLeave(env, *m);
      break;
    case proto::SHARD_MAP_ACK:
      m->has_map = true;
      SendBackups(m->info.rank());
      if (restoring_.erase(m->info.id()) > 0) return AnnounceServerBack(*m);
      if (growing_.erase(m->info.id()) > 0) return AnnounceNewRank(*m);
      pending_acks_.erase(m->info.id());
      return Progress();
    case proto::BACKUPS:
      if (!worker) OnBackupSaid(*m, h);
      return;
    case proto::PROMOTED:
      if (!worker) OnPromoted(*m, h);
      return;
    case proto::DRAINED:
      if (!worker) OnDrained(*m, h);
      return;
    case proto::MOVED:
      if (!worker) OnMoved(*m, h);
      return;
    case proto::POLICY_ACK:
      return OnPolicyAnswer(*m, h);
    case proto::CHECKPOINT_DONE:
      if (!worker) {
        checkpoints_.OnAnswer(m->info.id(), h, Now());
        return Progress();
      }
      break;
    case proto::EXPORT_DONE:
      if (!worker) return exports_.OnAnswer(m->info.id(), h, Now());
      break;
    case proto::WORKER_JOINED_ACK:
      if (!worker) return OnJoinAck(*m, h);
      break;
    case proto::ROUND_CHECKIN:
    case proto::ROUND_UPLOADED:
    case proto::ROUND_WATCH:
    case proto::ROUND_PROGRESS:
      if (worker) return HandleRound(env, *m);
      break;
    case proto::VIRTUAL_TURN:
      if (worker) return HoldTurn(env, *m);
      break;
    case proto::VIRTUAL_DONE:
      if (worker) return EndTurn(env, *m);
      break;
    case proto::SECAGG:
      if (worker) {
        fed_.Secure({m->info.id(), h.request_id(), env.identity}, h.secagg(), FedNow());
        return;
      }
      break;
    case proto::ROUND_CLOSED:
      if (!worker) {
        fed_.OnClosed(m->info.id(), h.fed_round().round(), LiveWorkers(), FedNow());
        return ReleaseVirtual();
      }
      break;
    case proto::ERROR:
      if (policy_changes_.contains(h.request_id())) return OnPolicyAnswer(*m, h);
      if (move_ && move_->sources.contains(m->info.id()) && h.request_id() == move_->id) {
        return OnMoved(*m, h);
      }
      if (h.has_table_export()) return exports_.OnAnswer(m->info.id(), h, Now());
      if (h.has_cut()) {
        checkpoints_.OnAnswer(m->info.id(), h, Now());
        return Progress();
      }
      return OnNodeError(*m, h);
    default:
      break;
  }
  Reply(env.identity,
        ErrorReply(h,
                   Status::InvalidArgument(fmt::format("the scheduler does not take {} from a {}",
                                                       proto::MsgType_Name(h.type()),
                                                       proto::Role_Name(m->info.role()))),
                   kSchedulerId));
}

// A federated client's (or evaluator's) round request. Under virtual time a check-in or an
// upload report is held until the virtual clock releases it (scheduler_virtual.cc).
void SchedulerLoop::HandleRound(const Envelope& env, const Member& m) {
  const proto::Header& h = env.message.header;
  const Arrival arrival{m.info.id(), h.request_id(), env.identity};
  if (h.type() == proto::ROUND_WATCH) {
    if (vclock_) vclock_->Waits(m.info.id());
    if (h.fed_round().has_evaluation()) fed_.Measured(m.info.id(), h.fed_round().evaluation());
    fed_.Watch(arrival, h.fed_round().round(), LiveWorkers(), FedNow());
    return ReleaseVirtual();
  }
  if (h.type() == proto::ROUND_PROGRESS) return DeclareProgress(env, m);
  if (fed_.Resent(arrival)) return;
  if (vclock_ && h.type() == proto::ROUND_CHECKIN) fed_.HolderBack(arrival.worker, FedNow());
  if (vclock_) return HoldRound(arrival, m, h);
  DispatchRound(h.type(), arrival, h.fed_round());
}

void SchedulerLoop::DispatchRound(proto::MsgType type, const Arrival& arrival,
                                  const proto::FedRound& request) {
  fed_.Report(arrival.worker, request);
  if (type == proto::ROUND_CHECKIN) return fed_.CheckIn(arrival, LiveWorkers(), FedNow());
  fed_.Uploaded(arrival, request.round(), LiveWorkers(), FedNow());
}

// A node's ERROR that answers no policy change: logged, and a rejected shard map fails every
// worker waiting for it.
void SchedulerLoop::OnNodeError(Member& m, const proto::Header& h) {
  spdlog::error("node {} reported: {}", m.info.id(), StatusOf(h).ToString());
  if (promoting_.contains(m.info.id())) return OnPromoted(m, h);
  if (auto d = drains_.find(m.info.rank());
      d != drains_.end() && d->second.primary == m.info.id()) {
    return OnDrained(m, h);
  }
  if (pending_acks_.erase(m.info.id()) == 0) return;
  for (const Arrival& a : waiting_for_map_) {
    proto::Header req;
    req.set_request_id(a.request_id);
    Reply(a.identity,
          ErrorReply(req,
                     Status::Internal(fmt::format("server {} rejected the shard map: {}",
                                                  m.info.id(), h.error_message())),
                     kSchedulerId));
  }
  waiting_for_map_.clear();
}

void SchedulerLoop::Progress() {
  const std::vector<int32_t> live = members_.LiveWorkers();
  if (!map_) {
    std::vector<Arrival> ready = declare_.TryRelease(live);
    if (!ready.empty()) BuildShardMap(ready);
  }
  if (map_ && pending_acks_.empty() && !waiting_for_map_.empty()) {
    proto::Header r;
    r.set_type(proto::SHARD_MAP);
    r.set_sender(kSchedulerId);
    *r.mutable_shard_map() = ToProto(*map_);
    *r.mutable_layer_schedule() = layers_.Hint();  // declared only by workers
    for (const Arrival& a : waiting_for_map_) {
      r.set_request_id(a.request_id);
      Reply(a.identity, r);
    }
    waiting_for_map_.clear();
  }
  std::vector<Arrival> released = barrier_.TryRelease(live);
  for (const Arrival& a : released) {
    proto::Header r;
    r.set_type(proto::BARRIER_RELEASE);
    r.set_sender(kSchedulerId);
    r.set_request_id(a.request_id);
    Reply(a.identity, r);
  }
  if (!released.empty()) {
    spdlog::debug("barrier {} released {} workers", barrier_.generation(), released.size());
  }
  if (members_.AllWorkersDone()) checkpoints_.Abandon(Now());
  if (members_.AllWorkersDone()) {
    spdlog::info("every worker has finished or died; shutting the servers down");
    Shutdown(/*everyone=*/false);
  }
}

void SchedulerLoop::Broadcast(proto::Header h) {
  for (const Member* m : members_.Alive()) Reply(m->identity, h);
}

void SchedulerLoop::Shutdown(bool everyone) {
  checkpoints_.Shutdown();
  exports_.Shutdown();
  CommitFed();  // answers of this turn go before SHUTDOWN
  proto::Header h;
  h.set_type(proto::SHUTDOWN);
  h.set_sender(kSchedulerId);
  for (const Member* m : members_.Alive()) {
    if (everyone || m->info.role() != proto::WORKER) Reply(m->identity, h);  // and aggregators
  }
  outbox_.Flush();  // what is still held then is lost with the process
  done_ = true;
}

}  // namespace hetps
