// SchedulerLoop: who may say what, and nodes joining, leaving and dying (scheduler_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "scheduler/scheduler_loop.h"

namespace hetps {

// With --auth=curve, what the key a message came with may do: register in its own role,
// operators change the policy, take checkpoints and export tables, anyone admitted reads the
// status, and a member's messages come with the key it registered with (a key cannot speak for
// another node).
Status SchedulerLoop::Authorize(const Envelope& env) {
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
    case proto::DRAIN:  // an operator's, or a stopping server's for its own rank
      if (*role == KeyRole::kServer) return Status();
      [[fallthrough]];
    case proto::EXPORT:
    case proto::MOVE:
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

// A worker in wall time beside virtual ones would hold the virtual clock (it never says when its
// next request happens) and one in virtual time cannot run on a wall clock: both are refused at
// the door. PyTorch workers (hetps.torch) take no virtual-time turns.
Status SchedulerLoop::SameClock(const proto::Header& h) const {
  if (h.role() != proto::WORKER || h.virtual_clock() == vclock_.has_value()) return Status();
  if (vclock_) {
    return Status::FailedPrecondition(
        "this scheduler runs virtual time (--clock=virtual): its workers must too (hetps-worker "
        "--clock=virtual, hetps.Client(virtual_clock=True)); hetps.torch workers run in wall "
        "time only");
  }
  return Status::FailedPrecondition(
      "this worker runs virtual time (--clock=virtual) and this scheduler wall time: start the "
      "scheduler with --clock=virtual too");
}

void SchedulerLoop::HandleRegister(const Envelope& env) {
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
  if (Status clock = SameClock(h); !clock.ok()) {
    spdlog::warn("refused registration of a {}: {}", proto::Role_Name(h.role()), clock.message());
    return Reply(env.identity, ErrorReply(h, clock, kSchedulerId));
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
  if (info.standby()) r.mutable_replica()->set_standby(true);  // asked for, or made one
  Reply(env.identity, r);
  spdlog::info("node {} joined: {} rank {} on {} pid {}{}", info.id(),
               proto::Role_Name(info.role()), info.rank(), info.host(), info.pid(),
               info.address().empty() ? "" : " at " + info.address());
  if ((*m)->info.standby()) return AdmitStandby(env, **m);
  if (members_.NewRank(**m)) return AdmitNewRank(env, *members_.ById((*m)->info.id()));
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
void SchedulerLoop::AdmitRestartedServer(const Envelope& env, const Member& m) {
  stats_.OnServerRestarted(m.info.id(), m.replaces);
  Reply(env.identity, ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/true));
  if (!map_) return AnnounceServerBack(m);
  // A server back on the data dir of a rank that was drained and retired (a pod of a scaled-down
  // StatefulSet scaled up again): the rank serves again and partitions move to it, as to a new
  // one (AnnounceNewRank once it installed the map).
  const bool retired = map_->retired().contains(m.info.rank());
  if (retired) {
    std::set<int32_t> left = map_->retired();
    left.erase(m.info.rank());
    map_ = *map_->WithRanks(map_->num_servers(), left);  // it holds nothing: always valid
    Save();
    spdlog::info("server rank {} serves again (it was retired)", m.info.rank());
  }
  proto::Header h;
  h.set_type(proto::SHARD_MAP);
  h.set_sender(kSchedulerId);
  *h.mutable_shard_map() = ToProto(*map_);
  (retired ? growing_ : restoring_).insert(m.info.id());
  Reply(env.identity, h);
  if (retired) members_.ById(m.info.id())->map_epoch = map_->epoch();
}

void SchedulerLoop::AnnounceServerBack(const Member& m) {
  stats_.OnServerBack(m.info.id());
  spdlog::info("server rank {} is back (node {} at {})", m.info.rank(), m.info.id(),
               m.info.address());
  proto::Header back = ViewMessage(proto::SERVER_BACK, /*alive_only=*/false);
  back.set_node(m.info.id());
  Broadcast(back);
}

void SchedulerLoop::AdmitLateWorker(const Member& m) {
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
void SchedulerLoop::SendJoins() {
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

void SchedulerLoop::OnJoinAck(const Member& server, const proto::Header& h) {
  auto it = joining_.find(h.node());
  if (it == joining_.end()) return;  // the worker died meanwhile
  it->second.waiting.erase(server.info.id());
  it->second.clock = std::max(it->second.clock, h.clock());
  FinishJoins();
}

// Sends each late worker that every live server counts now its view: the whole cluster, as at
// the start, then NODE_DEAD for each dead server it lists (its requests wait for the restart).
void SchedulerLoop::FinishJoins() {
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
proto::Header SchedulerLoop::ViewMessage(proto::MsgType type, bool alive_only) const {
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

void SchedulerLoop::HandleLeave(const Envelope& env, const Member& m) {
  const int32_t id = m.info.id();
  members_.MarkLeft(id);
  Save();
  stats_.OnLeft(id, Now());
  barrier_.Remove(id);
  declare_.Remove(id);
  if (vclock_) vclock_->Remove(id);
  if (turn_ == id) turn_.reset();
  fed_.RemoveClient(id, LiveWorkers(), FedNow());
  ReleaseVirtual();
  Reply(env.identity, ReplyTo(env.message.header, proto::LEAVE, kSchedulerId));
  outbox_.Forget(env.identity);
  const proto::Header left = AboutNode(proto::NODE_LEFT, id);
  for (const Member* s : members_.Alive()) {
    if (s->info.role() != proto::WORKER) Reply(s->identity, left);  // servers, aggregators
  }
  spdlog::info("worker {} (rank {}) finished; {} still running", id, m.info.rank(),
               members_.LiveWorkers().size());
  Progress();
}

void SchedulerLoop::OnDead(int32_t id) {
  const Member* m = members_.ById(id);
  auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - m->last_seen);
  spdlog::error("node {} ({} rank {}, pid {}) silent for {} ms: declared dead", id,
                proto::Role_Name(m->info.role()), m->info.rank(), m->info.pid(), silent.count());
  Depart(id);
}

void SchedulerLoop::Depart(int32_t id) {
  const Member* m = members_.ById(id);
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
  FailOver(id);
  exports_.OnServerDead(id);
  if (m->info.role() == proto::SERVER) {
    fed_.RemoveServer(id, LiveWorkers(), FedNow());
  } else {
    if (vclock_) vclock_->Remove(id);
    if (turn_ == id) turn_.reset();
    fed_.RemoveClient(id, LiveWorkers(), FedNow());
  }
  ReleaseVirtual();
  Progress();
}

}  // namespace hetps
