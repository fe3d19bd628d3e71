#include "scheduler/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
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
#include "scheduler/membership.h"
#include "scheduler/scheduler_store.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

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

class Loop {
 public:
  Loop(const SchedulerOptions& options, const std::atomic<bool>& stop)
      : options_(options),
        stop_(stop),
        members_(options.num_servers, options.num_workers,
                 options.max_workers > 0 ? options.max_workers : kMaxWorkerRanks),
        stats_(options.num_servers, options.num_workers, {.straggler = options.straggler}),
        checkpoints_({.dir = options.checkpoint_dir,
                      .every_clocks = options.checkpoint_every_clocks,
                      .keep = options.keep_checkpoints},
                     CheckpointActions()),
        fed_(options.fed, FedActions()),
        joins_(options.join_rate, options.join_burst),
        router_(ctx_, zmq::socket_type::router) {}

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
  void OnNodeError(const Member& member, const proto::Header& h);
  Status Authorize(const Envelope& env);
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
  std::unique_ptr<StatusHttp> http_;
  const Clock::time_point start_ = Clock::now();
  std::unique_ptr<SchedulerStore> store_;
  Checkpoints checkpoints_;
  FedRounds fed_;
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
  std::set<int32_t> restoring_;  // restarted servers installing the shard map
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

StatusOr<std::string> Loop::OpenDataDir() {
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
  }
  if (!state.policy().consistency().empty()) policy_ = state.policy();
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

Status Loop::OpenResume() {
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

FedRounds::Actions Loop::FedActions() {
  auto answer = [this](proto::MsgType type) {
    return [this, type](const Arrival& to, const proto::FedRound& r) {
      proto::Header h;
      h.set_type(type);
      h.set_sender(kSchedulerId);
      h.set_request_id(to.request_id);
      *h.mutable_fed_round() = r;
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
              }};
}

Checkpoints::Actions Loop::CheckpointActions() {
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

void Loop::Save() {
  if (!store_) return;
  proto::SchedulerState state;
  state.set_endpoint(endpoint_);
  state.set_num_servers(options_.num_servers);
  state.set_num_workers(options_.num_workers);
  for (proto::SchedulerMember& m : members_.Save()) *state.add_members() = std::move(m);
  state.set_formed(view_sent_);
  if (map_) *state.mutable_shard_map() = ToProto(*map_);
  if (policy_) *state.mutable_policy() = *policy_;
  if (Status s = store_->Save(state); !s.ok()) spdlog::error("{}", s.ToString());
}

void Loop::CommitFed() {
  if (!store_) return;
  if (Status s = store_->SaveFed(fed_.Save(Now())); !s.ok()) {
    // Sent all the same: holding the cluster up would not make the disk work again.
    spdlog::error("{}; a restart now would repeat what follows", s.ToString());
  }
  for (Outgoing& o : fed_outgoing_) Reply(o.identity, std::move(o.header));
  fed_outgoing_.clear();
}

Status Loop::Run() {
  if (Status s = ValidateSchedulerOptions(options_); !s.ok()) return s;
  if (Status s = OpenResume(); !s.ok()) return s;
  auto bind = OpenDataDir();
  if (!bind.ok()) return bind.status();
  router_.set(zmq::sockopt::linger, 2000);  // let SHUTDOWN reach the nodes on exit
  // Every message to the scheduler is a header (the largest, a declaration of the model's
  // tensors, holds about 50 bytes per tensor): a larger frame closes its connection unread.
  router_.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
  guard_.emplace(router_, options_.max_connections_per_address, "scheduler");
  if (Status s = CheckListenEndpoint(*bind, options_.auth, options_.insecure); !s.ok()) return s;
  if (options_.auth.curve) {
    zap_.emplace(
        ctx_, options_.auth.allow,
        std::map<std::string, std::set<KeyRole>>{
            {"scheduler",
             {KeyRole::kWorker, KeyRole::kServer, KeyRole::kOperator, KeyRole::kScheduler}}});
    options_.auth.SecureServer(router_, "scheduler");
  }
  try {
    router_.bind(*bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", *bind, e.what()));
  }
  const std::string endpoint = BoundEndpoint(router_);
  endpoint_ = endpoint;
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
    outbox_.Flush();
    if (Now() - last_observed_ >= 0.2) Observe();
    SendJoins();
    checkpoints_.Tick(stats_.MaxClock(),
                      map_ && pending_acks_.empty() && !members_.AllWorkersDone(), Now());
    fed_.Tick(LiveWorkers(), Now());
    CommitFed();
  }
  return Status();
}

void Loop::Handle(Envelope& env) {
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
void Loop::HandleMember(const Envelope& env, Member& member) {
  const proto::Header& h = env.message.header;
  Member* m = &member;
  const bool worker = m->info.role() == proto::WORKER;
  switch (h.type()) {
    case proto::HEARTBEAT:
      if (worker && h.has_worker_report()) {
        stats_.OnWorkerReport(m->info.id(), h.worker_report(), Now());
      } else if (!worker && h.has_server_report()) {
        stats_.OnServerReport(m->info.id(), h.server_report(), Now());
      }
      return Reply(env.identity, ReplyTo(h, proto::HEARTBEAT, kSchedulerId));
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
      if (restoring_.erase(m->info.id()) > 0) return AnnounceServerBack(*m);
      pending_acks_.erase(m->info.id());
      return Progress();
    case proto::POLICY_ACK:
      return OnPolicyAnswer(*m, h);
    case proto::CHECKPOINT_DONE:
      if (!worker) {
        checkpoints_.OnAnswer(m->info.id(), h, Now());
        return Progress();
      }
      break;
    case proto::WORKER_JOINED_ACK:
      if (!worker) return OnJoinAck(*m, h);
      break;
    case proto::ROUND_CHECKIN:
      if (worker) {
        if (fed_.Resent({m->info.id(), h.request_id(), env.identity})) return;
        fed_.Report(m->info.id(), h.fed_round());
        return fed_.CheckIn({m->info.id(), h.request_id(), env.identity}, LiveWorkers(), Now());
      }
      break;
    case proto::ROUND_UPLOADED:
      if (worker) {
        if (fed_.Resent({m->info.id(), h.request_id(), env.identity})) return;
        fed_.Report(m->info.id(), h.fed_round());
        return fed_.Uploaded({m->info.id(), h.request_id(), env.identity}, h.fed_round().round(),
                             LiveWorkers(), Now());
      }
      break;
    case proto::ROUND_WATCH:
      if (worker) {
        if (h.fed_round().has_evaluation()) {
          fed_.Measured(m->info.id(), h.fed_round().evaluation());
        }
        return fed_.Watch({m->info.id(), h.request_id(), env.identity}, h.fed_round().round(),
                          LiveWorkers(), Now());
      }
      break;
    case proto::ROUND_CLOSED:
      if (!worker) return fed_.OnClosed(m->info.id(), h.fed_round().round(), LiveWorkers(), Now());
      break;
    case proto::ERROR:
      if (policy_changes_.contains(h.request_id())) return OnPolicyAnswer(*m, h);
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

// A node's ERROR that answers no policy change: logged, and a rejected shard map fails every
// worker waiting for it.
void Loop::OnNodeError(const Member& m, const proto::Header& h) {
  spdlog::error("node {} reported: {}", m.info.id(), StatusOf(h).ToString());
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

// With --auth=curve, what the key a message came with may do: register in its own role,
// operators change the policy and take checkpoints, anyone admitted reads the status, and a
// member's messages come with the key it registered with (a key cannot speak for another node).
Status Loop::Authorize(const Envelope& env) {
  if (!options_.auth.curve) return Status();
  const proto::Header& h = env.message.header;
  const std::optional<KeyRole> role = options_.auth.RoleOf(env.peer);
  if (!role) return Status::PermissionDenied("the connection has no admitted key");
  switch (h.type()) {
    case proto::REGISTER: {
      const KeyRole wanted = h.role() == proto::SERVER ? KeyRole::kServer : KeyRole::kWorker;
      if (*role == wanted) return Status();
      return Status::PermissionDenied(
          fmt::format("a {} key cannot register a {}", KeyRoleName(*role), KeyRoleName(wanted)));
    }
    case proto::SET_POLICY:
    case proto::CHECKPOINT:
      if (*role == KeyRole::kOperator) return Status();
      return Status::PermissionDenied(fmt::format("{} needs an operator key; this is a {} key",
                                                  proto::MsgType_Name(h.type()),
                                                  KeyRoleName(*role)));
    case proto::STATUS:
      return Status();
    default:
      break;
  }
  const Member* m = members_.ByIdentity(env.identity);
  if (m != nullptr && m->info.public_key() != env.peer) {
    return Status::PermissionDenied(
        fmt::format("node {} registered with another key than this connection's", m->info.id()));
  }
  return Status();
}

void Loop::HandleRegister(const Envelope& env) {
  const proto::Header& h = env.message.header;
  const bool retried = members_.ByIdentity(env.identity) != nullptr;
  if (const double wait = retried ? 0 : joins_.Wait(env.address, Now()); wait > 0) {
    const std::string from = env.address.empty() ? "a local peer" : env.address;
    if (++joins_refused_ <= 20 || joins_refused_ % 1000 == 0) {
      spdlog::warn("refused a registration from {} ({} so far): more than {} at once, then {}/s",
                   from, joins_refused_, options_.join_burst, options_.join_rate);
    }
    Reply(env.identity,
          ErrorReply(h,
                     Status::Unavailable(fmt::format(
                         "too many registrations from {}: at most {} at once, then {} per second "
                         "(--join_burst, --join_rate); retry in {:.0f} ms",
                         from, options_.join_burst, options_.join_rate, 1000 * wait)),
                     kSchedulerId));
    return;
  }
  auto m = members_.Register(env.identity, h, Clock::now());
  if (!m.ok()) {
    spdlog::warn("refused registration of {}: {}", env.identity, m.status().ToString());
    Reply(env.identity, ErrorReply(h, m.status(), kSchedulerId));
    return;
  }
  if (!retried) joins_.Take(env.address, Now());
  // The key it authenticated with: workers dial a server expecting it, and the node's later
  // messages must come with it.
  if (options_.auth.curve) members_.ByIdentity(env.identity)->info.set_public_key(env.peer);
  const proto::NodeInfo& info = (*m)->info;
  stats_.OnJoin(info, Now());
  if (info.role() == proto::SERVER && h.has_policy()) {
    if (!policy_) {
      policy_ = h.policy();
    } else if (!SameMessage(*policy_, h.policy())) {
      spdlog::warn("server {} runs consistency '{}', the first server '{}'", info.id(),
                   h.policy().consistency(), policy_->consistency());
    }
  }
  const bool formed_now = !view_sent_ && members_.complete();
  view_sent_ = view_sent_ || formed_now;
  Save();  // before the node hears it was admitted
  proto::Header r = ReplyTo(h, proto::REGISTER_REPLY, kSchedulerId);
  r.set_node(info.id());
  r.set_rank(info.rank());
  Reply(env.identity, r);
  spdlog::info("node {} joined: {} rank {} on {} pid {}{}", info.id(),
               proto::Role_Name(info.role()), info.rank(), info.host(), info.pid(),
               info.address().empty() ? "" : " at " + info.address());
  if (members_.TookOver(**m)) return AdmitRestartedServer(env, **m);
  if (members_.JoinedLate(**m)) return AdmitLateWorker(**m);
  if (!members_.complete()) return;
  const proto::Header view = ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/false);
  if (!formed_now) {
    Reply(env.identity, view);  // a retried registration
    return;
  }
  spdlog::info("cluster complete: {} servers, {} workers", options_.num_servers,
               options_.num_workers);
  Broadcast(view);
}

// A server restarted (on its data dir) in place of a dead one: it gets the live cluster's view
// and the shard map; once it acknowledged the map (it restored its shards by then) everyone
// learns its new address.
void Loop::AdmitRestartedServer(const Envelope& env, const Member& m) {
  stats_.OnServerRestarted(m.info.id(), m.replaces);
  Reply(env.identity, ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/true));
  if (!map_) return AnnounceServerBack(m);
  proto::Header h;
  h.set_type(proto::SHARD_MAP);
  h.set_sender(kSchedulerId);
  *h.mutable_shard_map() = ToProto(*map_);
  restoring_.insert(m.info.id());
  Reply(env.identity, h);
}

void Loop::AnnounceServerBack(const Member& m) {
  stats_.OnServerBack(m.info.id());
  spdlog::info("server rank {} is back (node {} at {})", m.info.rank(), m.info.id(),
               m.info.address());
  proto::Header back = ViewMessage(proto::SERVER_BACK, /*alive_only=*/false);
  back.set_node(m.info.id());
  Broadcast(back);
}

void Loop::AdmitLateWorker(const Member& m) {
  Joining& j = joining_[m.info.id()];
  j.identity = m.identity;
  j.info = m.info;
  for (int32_t id : members_.LiveServers()) j.waiting.insert(id);
  SendJoins();
  FinishJoins();  // at once when no server is alive (a restarted one learns it from its view)
}

// (Re)sends WORKER_JOINED to the servers that have not acknowledged it, at most every 500 ms:
// a message to a server whose connection is not up at that moment (e.g. just after this
// scheduler was restarted) is dropped by ZeroMQ, and servers take a repeat as a no-op.
void Loop::SendJoins() {
  const double now = Now();
  for (auto& [worker, j] : joining_) {
    if (now - j.sent_at < 0.5) continue;
    j.sent_at = now;
    proto::Header h;
    h.set_type(proto::WORKER_JOINED);
    h.set_sender(kSchedulerId);
    *h.mutable_view()->add_nodes() = j.info;
    for (int32_t id : j.waiting) Reply(members_.ById(id)->identity, h);
  }
}

void Loop::OnJoinAck(const Member& server, const proto::Header& h) {
  auto it = joining_.find(h.node());
  if (it == joining_.end()) return;  // the worker died meanwhile
  it->second.waiting.erase(server.info.id());
  it->second.clock = std::max(it->second.clock, h.clock());
  FinishJoins();
}

// Sends each late worker that every live server counts now its view: the whole cluster, as at
// the start, then NODE_DEAD for each dead server it lists (its requests wait for the restart).
void Loop::FinishJoins() {
  for (auto it = joining_.begin(); it != joining_.end();) {
    if (!it->second.waiting.empty()) {
      ++it;
      continue;
    }
    proto::Header view = ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/false);
    view.mutable_view()->set_start_clock(it->second.clock);
    Reply(it->second.identity, view);
    for (const proto::NodeInfo& node : view.view().nodes()) {
      const Member* n = members_.ById(node.id());
      if (node.role() != proto::SERVER || n->state != Member::State::kDead) continue;
      Reply(it->second.identity, AboutNode(proto::NODE_DEAD, node.id()));
    }
    const Member* w = members_.ById(it->first);
    spdlog::info("worker rank {} (node {}) joined the running cluster at clock {}; {} workers now",
                 w->info.rank(), it->first, it->second.clock, members_.LiveWorkers().size());
    it = joining_.erase(it);
  }
}

// A message of `type` carrying the cluster view (every node, or only the live ones), the
// failure-detection timeout and the current policy.
proto::Header Loop::ViewMessage(proto::MsgType type, bool alive_only) const {
  proto::Header h;
  h.set_type(type);
  h.set_sender(kSchedulerId);
  *h.mutable_view() = members_.View(alive_only);
  h.mutable_view()->set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
  if (resume_) h.mutable_view()->set_start_clock(resume_->clock());  // late joiners: overridden
  if (store_) h.mutable_view()->set_scheduler_recovery_timeout_ms(options_.recovery_timeout_ms);
  if (policy_) *h.mutable_view()->mutable_policy() = *policy_;
  return h;
}

void Loop::HandleDeclare(const Envelope& env, const Member& m) {
  const proto::Header& h = env.message.header;
  if (map_) {
    Status s = CheckAgainstMap(h);
    if (!s.ok()) return Reply(env.identity, ErrorReply(h, s, kSchedulerId));
    if (!pending_acks_.empty()) {
      waiting_for_map_.push_back({m.info.id(), h.request_id(), env.identity});
      return;
    }
    proto::Header r = ReplyTo(h, proto::SHARD_MAP, kSchedulerId);
    *r.mutable_shard_map() = ToProto(*map_);
    return Reply(env.identity, r);
  }
  // Check the whole declaration before taking any of it.
  for (const proto::TensorSpec& p : h.tensors()) {
    TensorSpec t = FromProto(p);
    auto it = declared_.find(t.name);
    if (it != declared_.end() && (it->second.shape != t.shape || it->second.layer != t.layer)) {
      return Reply(env.identity,
                   ErrorReply(h,
                              Status::InvalidArgument(fmt::format(
                                  "tensor '{}' was declared with another shape or layer", t.name)),
                              kSchedulerId));
    }
  }
  for (const proto::TensorSpec& p : h.tensors()) declared_.emplace(p.name(), FromProto(p));
  declare_.Arrive({m.info.id(), h.request_id(), env.identity});
  Progress();
}

Status Loop::CheckAgainstMap(const proto::Header& declare) const {
  for (const proto::TensorSpec& p : declare.tensors()) {
    int32_t id = map_->TensorId(p.name());
    TensorSpec t = FromProto(p);
    if (id < 0) {
      return Status::FailedPrecondition(
          fmt::format("tensor '{}' is new, but the shard map was already built", t.name));
    }
    if (map_->tensors()[id].shape != t.shape || map_->tensors()[id].layer != t.layer) {
      return Status::InvalidArgument(
          fmt::format("tensor '{}' was declared with another shape or layer", t.name));
    }
  }
  return Status();
}

void Loop::HandleLeave(const Envelope& env, const Member& m) {
  const int32_t id = m.info.id();
  members_.MarkLeft(id);
  Save();
  stats_.OnLeft(id, Now());
  barrier_.Remove(id);
  declare_.Remove(id);
  fed_.RemoveClient(id, LiveWorkers(), Now());
  Reply(env.identity, ReplyTo(env.message.header, proto::LEAVE, kSchedulerId));
  outbox_.Forget(env.identity);
  const proto::Header left = AboutNode(proto::NODE_LEFT, id);
  for (const Member* s : members_.Alive()) {
    if (s->info.role() == proto::SERVER) Reply(s->identity, left);
  }
  spdlog::info("worker {} (rank {}) finished; {} still running", id, m.info.rank(),
               members_.LiveWorkers().size());
  Progress();
}

void Loop::OnDead(int32_t id) {
  const Member* m = members_.ById(id);
  auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - m->last_seen);
  spdlog::error("node {} ({} rank {}, pid {}) silent for {} ms: declared dead", id,
                proto::Role_Name(m->info.role()), m->info.rank(), m->info.pid(), silent.count());
  outbox_.Forget(m->identity);
  Save();
  Broadcast(AboutNode(proto::NODE_DEAD, id));
  stats_.OnDead(id, Now());
  barrier_.Remove(id);
  declare_.Remove(id);
  pending_acks_.erase(id);
  restoring_.erase(id);
  joining_.erase(id);
  for (auto& [worker, j] : joining_) j.waiting.erase(id);
  FinishJoins();
  for (auto& [pid, change] : policy_changes_) change.waiting.erase(id);
  FinishPolicyChanges();
  checkpoints_.OnServerDead(id, Now());
  if (m->info.role() == proto::SERVER) {
    fed_.RemoveServer(id, LiveWorkers(), Now());
  } else {
    fed_.RemoveClient(id, LiveWorkers(), Now());
  }
  Progress();
}

void Loop::StartPolicyChange(const Envelope& env) {
  const proto::Header& h = env.message.header;
  std::set<int32_t> servers;
  for (int32_t id : members_.LiveServers()) servers.insert(id);
  if (!view_sent_ || servers.empty()) {
    Reply(env.identity,
          ErrorReply(h, Status::Unavailable("the cluster has not formed yet"), kSchedulerId));
    return;
  }
  const uint64_t id = next_policy_id_++;
  PolicyChange& change = policy_changes_[id];
  change.requester.request_id = h.request_id();
  change.requester.identity = env.identity;
  change.waiting = servers;
  change.policy = h.policy();
  proto::Header out;
  out.set_type(proto::SET_POLICY);
  out.set_sender(kSchedulerId);
  out.set_request_id(id);
  *out.mutable_policy() = h.policy();
  for (int32_t s : servers) Reply(members_.ById(s)->identity, out);
  spdlog::info("operator requested consistency '{}'; asking {} servers", h.policy().consistency(),
               servers.size());
}

void Loop::OnPolicyAnswer(const Member& server, const proto::Header& h) {
  auto it = policy_changes_.find(h.request_id());
  if (it == policy_changes_.end()) return;
  it->second.waiting.erase(server.info.id());
  Status s = StatusOf(h);
  if (!s.ok() && it->second.status.ok()) {
    it->second.status =
        Status(s.code(), fmt::format("server {}: {}", server.info.id(), s.message()));
  }
  FinishPolicyChanges();
}

void Loop::FinishPolicyChanges() {
  for (auto it = policy_changes_.begin(); it != policy_changes_.end();) {
    if (!it->second.waiting.empty()) {
      ++it;
      continue;
    }
    proto::Header req;
    req.set_request_id(it->second.requester.request_id);
    const Status& s = it->second.status;
    Reply(it->second.requester.identity, s.ok() ? ReplyTo(req, proto::POLICY_ACK, kSchedulerId)
                                                : ErrorReply(req, s, kSchedulerId));
    spdlog::info("policy change {}", s.ok() ? "applied on every live server" : s.ToString());
    if (s.ok()) {
      const bool scheduler_rounds = policy_ && policy_->scheduler_rounds();  // no switch changes it
      policy_ = it->second.policy;
      policy_->set_scheduler_rounds(scheduler_rounds);
      Save();
    }
    it = policy_changes_.erase(it);
  }
}

void Loop::Progress() {
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

void Loop::BuildShardMap(const std::vector<Arrival>& waiting) {
  std::vector<TensorSpec> tensors;
  for (const auto& [name, t] : declared_) tensors.push_back(t);
  auto map = ShardMap::Build(std::move(tensors), options_.num_servers, options_.partition_bytes);
  if (!map.ok()) {
    spdlog::error("cannot build the shard map: {}", map.status().ToString());
    for (const Arrival& a : waiting) {
      proto::Header req;
      req.set_request_id(a.request_id);
      Reply(a.identity, ErrorReply(req, map.status(), kSchedulerId));
    }
    declared_.clear();
    return;
  }
  if (resume_ && !SameMessage(ToProto(*map), resume_->shard_map())) {
    const Status s = Status::FailedPrecondition(fmt::format(
        "the declared model ({} tensors, {} partitions) is not the one of checkpoint {} ({} "
        "tensors, {} partitions): resume with the same model and --partition_bytes",
        map->tensors().size(), map->partitions().size(), options_.resume_from,
        resume_->shard_map().tensors_size(), resume_->shard_map().partitions_size()));
    spdlog::error("{}", s.message());
    for (const Arrival& a : waiting) {
      proto::Header req;
      req.set_request_id(a.request_id);
      Reply(a.identity, ErrorReply(req, s, kSchedulerId));
    }
    declared_.clear();
    return;
  }
  map_ = std::move(*map);
  Save();  // before any server installs it
  waiting_for_map_ = waiting;
  std::vector<int64_t> bytes = map_->ServerBytes();
  spdlog::info("shard map: {} tensors, {} partitions over {} servers ({:.1f}..{:.1f} MiB each)",
               map_->tensors().size(), map_->partitions().size(), options_.num_servers,
               *std::min_element(bytes.begin(), bytes.end()) / 1048576.0,
               *std::max_element(bytes.begin(), bytes.end()) / 1048576.0);
  proto::Header h;
  h.set_type(proto::SHARD_MAP);
  h.set_sender(kSchedulerId);
  *h.mutable_shard_map() = ToProto(*map_);
  for (const Member* m : members_.Alive()) {
    if (m->info.role() != proto::SERVER) continue;
    pending_acks_.insert(m->info.id());
    Reply(m->identity, h);
  }
}

// The figures ClusterStats takes from the loop rather than from reports: the federated rounds'
// summary and what the scheduler refused.
void Loop::SetFigures() {
  stats_.SetFederated(fed_.SummaryJson());
  stats_.SetRefused({.messages = refused_,
                     .registrations = joins_refused_,
                     .connections = guard_ ? guard_->refused() : 0});
}

void Loop::Observe() {
  const double now = Now();
  last_observed_ = now;
  stats_.Update(now);
  SendHints();
  SetFigures();
  if (http_) http_->Publish(stats_.StatusJson(now), stats_.Metrics(now));
}

// Servers learn the flags and the quorum when they change (semi_async:quorum=auto takes the
// quorum, backup:backups=auto the flags); the operator reads each flag change in the log.
void Loop::SendHints() {
  std::vector<int32_t> stragglers = stats_.Stragglers();
  const int64_t quorum = stats_.Quorum();
  if (!view_sent_ || (stragglers == hinted_stragglers_ && quorum == hinted_quorum_)) return;
  std::set<int32_t> changed;  // flagged or cleared since the last hint
  std::ranges::set_symmetric_difference(stragglers, hinted_stragglers_,
                                        std::inserter(changed, changed.end()));
  for (int32_t id : changed) {
    const Member* m = members_.ById(id);
    const StragglerState* w = stats_.Straggler(id);
    if (m == nullptr || w == nullptr || m->state != Member::State::kAlive) continue;  // gone
    if (std::ranges::find(stragglers, id) != stragglers.end()) {
      spdlog::warn(
          "worker rank {} (node {}) is a straggler ({}): iteration {:.1f} ms EWMA, {:.1f} "
          "ms under way, median {:.1f} ms",
          m->info.rank(), id, w->Reason(), w->ewma_ms, w->busy_ms, stats_.StragglerReference(id));
    } else {
      spdlog::info("worker rank {} (node {}) recovered: iteration {:.1f} ms EWMA", m->info.rank(),
                   id, w->ewma_ms);
    }
  }
  proto::Header h;
  h.set_type(proto::POLICY_HINT);
  h.set_sender(kSchedulerId);
  for (int32_t id : stragglers) h.add_stragglers(id);
  h.set_quorum(quorum);
  for (int32_t id : members_.LiveServers()) Reply(members_.ById(id)->identity, h);
  hinted_stragglers_ = std::move(stragglers);
  hinted_quorum_ = quorum;
}

void Loop::Broadcast(proto::Header h) {
  for (const Member* m : members_.Alive()) Reply(m->identity, h);
}

void Loop::Shutdown(bool everyone) {
  checkpoints_.Shutdown();
  CommitFed();  // answers of this turn go before SHUTDOWN
  proto::Header h;
  h.set_type(proto::SHUTDOWN);
  h.set_sender(kSchedulerId);
  for (const Member* m : members_.Alive()) {
    if (everyone || m->info.role() == proto::SERVER) Reply(m->identity, h);
  }
  outbox_.Flush();  // what is still held then is lost with the process
  done_ = true;
}

}  // namespace

Status ValidateSchedulerOptions(const SchedulerOptions& o) {
  if (o.num_servers < 1 || o.num_workers < 1) {
    return Status::InvalidArgument("num_servers and num_workers must be >= 1");
  }
  if (o.max_workers != 0 && (o.max_workers < o.num_workers || o.max_workers > kMaxWorkerRanks)) {
    return Status::InvalidArgument(fmt::format(
        "max_workers must be 0 (no bound) or in [num_workers, {}], got {} (num_workers {})",
        kMaxWorkerRanks, o.max_workers, o.num_workers));
  }
  if (o.max_connections_per_address < 0) {
    return Status::InvalidArgument(
        fmt::format("max_connections_per_address must be >= 0 (0: no limit), got {}",
                    o.max_connections_per_address));
  }
  if (!(o.join_rate >= 0) || o.join_burst < 1) {
    return Status::InvalidArgument(
        fmt::format("need join_rate >= 0 (0: no limit) and join_burst >= 1, got {} and {}",
                    o.join_rate, o.join_burst));
  }
  if (o.checkpoint_every_clocks < 0 || o.keep_checkpoints < 0) {
    return Status::InvalidArgument("checkpoint_every_clocks and keep_checkpoints must be >= 0");
  }
  if (o.checkpoint_every_clocks > 0 && o.checkpoint_dir.empty()) {
    return Status::InvalidArgument("checkpoint_every_clocks needs a --checkpoint_dir");
  }
  if (o.partition_bytes < 4) return Status::InvalidArgument("partition_bytes must be >= 4");
  if (Status s = ValidateFedRoundsOptions(o.fed); !s.ok()) return s;
  if (o.http_port < -1 || o.http_port > 65535) {
    return Status::InvalidArgument(fmt::format(
        "http_port must be -1 (off), 0 (any free port) or a port, got {}", o.http_port));
  }
  if (!(o.straggler.factor > 1) || !(o.straggler.clear_factor >= 1) ||
      o.straggler.clear_factor > o.straggler.factor) {
    return Status::InvalidArgument(fmt::format(
        "need straggler_factor > 1 and 1 <= straggler_clear_factor <= it, got {} and {}",
        o.straggler.factor, o.straggler.clear_factor));
  }
  return Status();
}

SchedulerNode::SchedulerNode(SchedulerOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

Status SchedulerNode::Run() {
  Loop loop(options_, stop_);
  return loop.Run();
}

}  // namespace hetps
