// SchedulerLoop: planned hand-overs of server ranks (hetps ctl drain-server; scheduler_loop.h,
// docs/replication.md). A rank whose backup holds all of it can be moved off its primary's
// machine without a failure: the primary stops taking requests, waits until its backups
// acknowledged every record and says DRAINED; a backup is promoted as after a failure, minus
// the wait for the heartbeat timeout, the primary is retired once the backup serves, and the
// workers resend what waited.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "scheduler/scheduler_loop.h"

namespace hetps {
namespace {

// A drain not finished in this time is called off (the primary serves again).
constexpr double kDrainSeconds = 60;

}  // namespace

void SchedulerLoop::StartDrain(const Envelope& env) {
  const proto::Header& h = env.message.header;
  const int32_t rank = h.rank();
  auto refuse = [&](const Status& s) {
    spdlog::warn("drain of server rank {} refused: {}", rank, s.message());
    Reply(env.identity, ErrorReply(h, s, kSchedulerId));
  };
  if (!map_) return refuse(Status::Unavailable("the cluster has not started (no shard map yet)"));
  if (members_.replicas() == 0) return DrainByMoves(env);
  // A registered node may hand over only the rank it serves (a stopping primary does).
  const Member* self = members_.ByIdentity(env.identity);
  if (self != nullptr) {
    if (self->info.role() != proto::SERVER || self->info.rank() != rank ||
        members_.Primary(rank) != self) {
      return refuse(Status::PermissionDenied("a node may drain only the rank it serves"));
    }
  }
  if (rank < 0 || rank >= map_->num_servers()) {
    return refuse(Status::InvalidArgument(
        fmt::format("no server rank {} (ranks 0..{})", rank, map_->num_servers() - 1)));
  }
  if (drains_.contains(rank)) {
    return refuse(Status::FailedPrecondition(fmt::format("rank {} is being drained", rank)));
  }
  const Member* primary = members_.Primary(rank);
  if (primary == nullptr) {
    return refuse(Status::Unavailable(fmt::format("rank {} has no live primary", rank)));
  }
  for (const Member* b : members_.Backups(rank)) {
    if (promoting_.contains(b->info.id())) {
      return refuse(Status::Unavailable(fmt::format("rank {} is failing over", rank)));
    }
  }
  if (SyncedBackup(rank) == nullptr) {
    return refuse(Status::FailedPrecondition(fmt::format(
        "server rank {} has no backup holding all its partitions: start a standby "
        "(hetps-server --standby), wait until the scheduler logs that it holds the rank, then "
        "drain",
        rank)));
  }
  drains_[rank] = {.requester = {-1, h.request_id(), env.identity},
                   .primary = primary->info.id(),
                   .since = Now()};
  proto::Header d;
  d.set_type(proto::DRAIN);
  d.set_sender(kSchedulerId);
  d.set_rank(rank);
  Reply(primary->identity, d);
  spdlog::info("server rank {}: draining node {} ({})", rank, primary->info.id(),
               self != nullptr ? "it is stopping" : "an operator asked");
}

// The primary holds nothing its backups lack and takes no requests: a synced backup is
// promoted, and the primary is retired once it serves (RetireDrained). If no backup is left
// (it died meanwhile), the primary serves again.
// Without backups (--replicas=0) an elastic cluster (--max_servers) drains a rank by moving its
// partitions to the other ranks (docs/resharding.md) and retiring it.
void SchedulerLoop::DrainByMoves(const Envelope& env) {
  const proto::Header& h = env.message.header;
  const int32_t rank = h.rank();
  auto refuse = [&](const Status& s) {
    spdlog::warn("drain of server rank {} refused: {}", rank, s.message());
    Reply(env.identity, ErrorReply(h, s, kSchedulerId));
  };
  if (options_.max_servers == 0) {
    return refuse(Status::FailedPrecondition(
        "the cluster keeps no backups (--replicas=0) and its ranks are fixed (--max_servers=0): "
        "a rank is handed only to a backup that holds it"));
  }
  const Member* self = members_.ByIdentity(env.identity);
  if (self != nullptr && (self->info.role() != proto::SERVER || self->info.rank() != rank)) {
    return refuse(Status::PermissionDenied("a node may drain only the rank it serves"));
  }
  if (!map_->serving(rank) || members_.Primary(rank) == nullptr) {
    return refuse(Status::InvalidArgument(fmt::format("server rank {} serves nothing", rank)));
  }
  if (Status s = CheckMovable(); !s.ok()) return refuse(s);
  auto moves = DrainMoves(rank);
  if (!moves.ok()) return refuse(moves.status());
  BeginMove(*moves, {-1, h.request_id(), env.identity}, rank);
}

void SchedulerLoop::OnDrained(Member& primary, const proto::Header& h) {
  const int32_t rank = primary.info.rank();
  auto d = drains_.find(rank);
  if (d == drains_.end() || d->second.primary != primary.info.id() || d->second.promoted >= 0) {
    return;
  }
  if (h.type() == proto::ERROR) return FinishDrain(rank, StatusOf(h));
  Member* next = SyncedBackup(rank);
  if (next == nullptr) {
    Resume(primary);
    return FinishDrain(rank, Status::Unavailable(fmt::format(
                                 "rank {} lost its synced backup during the drain; node {} "
                                 "serves it again",
                                 rank, primary.info.id())));
  }
  spdlog::info("server rank {}: node {} holds nothing its backups lack", rank, primary.info.id());
  d->second.promoted = next->info.id();
  Promote(*next, primary);
}

void SchedulerLoop::RetireDrained(const Member& serving) {
  auto d = drains_.find(serving.info.rank());
  if (d == drains_.end() || d->second.promoted != serving.info.id()) return;
  Member* old = members_.ById(d->second.primary);
  if (old->state == Member::State::kAlive) {
    proto::Header bye;
    bye.set_type(proto::SHUTDOWN);
    bye.set_sender(kSchedulerId);
    Reply(old->identity, bye);
    spdlog::warn("server rank {}: retiring node {}", serving.info.rank(), old->info.id());
    members_.MarkDead(old->info.id());
    Depart(old->info.id());  // the workers hear NODE_DEAD, then SERVER_BACK
  }
  FinishDrain(serving.info.rank(), Status(), &serving);
}

bool SchedulerLoop::CancelDrain(Member& backup) {
  const int32_t rank = backup.info.rank();
  auto d = drains_.find(rank);
  if (d == drains_.end() || d->second.promoted != backup.info.id()) return false;
  promoting_.erase(backup.info.id());
  Member& primary = *members_.ById(d->second.primary);
  members_.Demote(backup, primary);
  --epochs_[rank];  // the promotion never happened
  Save();
  if (primary.state != Member::State::kAlive) {
    FinishDrain(rank, Status::Unavailable(fmt::format("rank {} lost both its replicas", rank)));
    return false;
  }
  Resume(primary);
  SendBackups(rank);
  FinishDrain(rank, Status::Unavailable(
                        fmt::format("node {} could not take rank {} over; node {} serves it again",
                                    backup.info.id(), rank, primary.info.id())));
  return true;
}

void SchedulerLoop::Resume(const Member& primary) {
  proto::Header resume;
  resume.set_type(proto::RESUME);
  resume.set_sender(kSchedulerId);
  Reply(primary.identity, resume);
}

// Answers the operator: `serving` took the rank over, or why the drain ended without it.
void SchedulerLoop::FinishDrain(int32_t rank, const Status& s, const Member* serving) {
  auto d = drains_.find(rank);
  if (d == drains_.end()) return;
  proto::Header req;
  req.set_request_id(d->second.requester.request_id);
  // A stopping primary asked for its own drain: retired, it hears nothing more.
  const Member* requester = members_.ByIdentity(d->second.requester.identity);
  const bool answer = requester == nullptr || requester->state == Member::State::kAlive;
  if (!s.ok() || serving == nullptr) {
    spdlog::error("drain of server rank {} failed: {}", rank, s.message());
    if (answer) Reply(d->second.requester.identity, ErrorReply(req, s, kSchedulerId));
  } else {
    proto::Header r = ReplyTo(req, proto::DRAIN, kSchedulerId);
    r.set_rank(rank);
    r.set_node(serving->info.id());
    r.mutable_replica()->set_primary(d->second.primary);
    r.mutable_replica()->set_epoch(epochs_[rank]);
    spdlog::info("server rank {}: handed from node {} to node {} in {:.3f} s (epoch {})", rank,
                 d->second.primary, serving->info.id(), Now() - d->second.since, epochs_[rank]);
    if (answer) Reply(d->second.requester.identity, r);
  }
  drains_.erase(d);
}

void SchedulerLoop::ExpireDrains() {
  for (auto it = drains_.begin(); it != drains_.end();) {
    const auto [rank, d] = *it++;
    // Once a backup is being promoted, its answer (or its death) ends the drain.
    if (d.promoted >= 0 || Now() - d.since < kDrainSeconds) continue;
    const Member* primary = members_.ById(d.primary);
    if (primary != nullptr && primary->state == Member::State::kAlive) Resume(*primary);
    FinishDrain(rank, Status::DeadlineExceeded(fmt::format(
                          "rank {} did not hand over in {:.0f} s; its primary serves again", rank,
                          kDrainSeconds)));
  }
}

}  // namespace hetps
