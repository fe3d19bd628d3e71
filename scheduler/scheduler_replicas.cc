// SchedulerLoop: backups of server ranks (--replicas; scheduler_loop.h, docs/replication.md).
// A standby server registers as a backup of a rank, installs the shard map, and is named to
// the rank's primary, which sends it every partition's state and then every record; it says
// when it holds every partition (synced at the primary's epoch). When a primary dies, a synced
// backup of its rank is promoted (the epoch goes up, fencing the old primary out: backups
// refuse records of an older epoch), and once it serves, the workers hear the rank's new
// address as after a restart (SERVER_BACK) and send it what the dead primary left unanswered.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "scheduler/scheduler_loop.h"

namespace hetps {

void SchedulerLoop::AdmitStandby(const Envelope& env, const Member& m) {
  Reply(env.identity, ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/true));
  spdlog::info("node {} backs up server rank {}", m.info.id(), m.info.rank());
  if (!map_) return;  // it gets the map with the servers
  proto::Header h;
  h.set_type(proto::SHARD_MAP);
  h.set_sender(kSchedulerId);
  *h.mutable_shard_map() = ToProto(*map_);
  Reply(env.identity, h);
}

// Tells the rank's backups whom they follow, and its primary the backups that said they follow
// it (so that no shipment reaches a backup before its word of the primary).
void SchedulerLoop::SendBackups(int32_t rank) {
  if (members_.replicas() == 0 || !map_) return;
  const Member* primary = members_.Primary(rank);
  if (primary == nullptr) return;
  int64_t& epoch = epochs_[rank];
  epoch = std::max<int64_t>(epoch, 1);
  proto::Header to_primary;
  to_primary.set_type(proto::BACKUPS);
  to_primary.set_sender(kSchedulerId);
  to_primary.mutable_replica()->set_epoch(epoch);
  for (Member* b : members_.Backups(rank)) {
    if (!b->has_map) continue;
    if (b->follows == primary->info.id() && b->follows_epoch == epoch) {
      *to_primary.mutable_replica()->add_backups() = b->info;
      continue;
    }
    proto::Header follow = to_primary;
    follow.mutable_replica()->set_primary(primary->info.id());
    Reply(b->identity, follow);
  }
  Reply(primary->identity, to_primary);
}

void SchedulerLoop::OnBackupSaid(Member& backup, const proto::Header& h) {
  if (!backup.info.standby()) return;
  const proto::Replica& r = h.replica();
  backup.has_map = true;  // it installed the map before it could follow anyone
  // A scheduler restarted on its data dir learns the rank's epoch again from its backups.
  const Member* primary = members_.Primary(backup.info.rank());
  if (primary != nullptr && primary->info.id() == r.primary()) {
    epochs_[backup.info.rank()] = std::max(epochs_[backup.info.rank()], r.epoch());
  }
  if (!r.synced()) {
    backup.follows = r.primary();
    backup.follows_epoch = r.epoch();
    return SendBackups(backup.info.rank());
  }
  backup.synced_epoch = r.epoch();
  spdlog::info("node {} holds every partition of server rank {} (epoch {})", backup.info.id(),
               backup.info.rank(), backup.synced_epoch);
}

// A dead primary's rank goes to a backup that holds all of it; a dead backup leaves its
// primary's set.
void SchedulerLoop::FailOver(int32_t id) {
  Member* dead = members_.ById(id);
  if (members_.replicas() == 0 || dead->info.role() != proto::SERVER) return;
  const int32_t rank = dead->info.rank();
  if (dead->info.standby()) return SendBackups(rank);
  if (dead->superseded) return;  // a drained primary, retired once its backup served
  promoting_.erase(id);
  if (CancelDrain(*dead)) return;  // the backup died taking a drained rank over
  Member* next = SyncedBackup(rank);
  if (next == nullptr) {
    spdlog::error(
        "server rank {} has no backup holding all its partitions; its requests wait "
        "for a restart of the server",
        rank);
    return;
  }
  Promote(*next, *dead);
}

Member* SchedulerLoop::SyncedBackup(int32_t rank) {
  for (Member* b : members_.Backups(rank)) {
    if (b->synced_epoch == epochs_[rank]) return b;
  }
  return nullptr;
}

void SchedulerLoop::Promote(Member& next, Member& old) {
  const int32_t rank = old.info.rank();
  members_.Promote(next, old);
  const int64_t epoch = ++epochs_[rank];
  Save();
  stats_.OnServerRestarted(next.info.id(), old.info.id());
  proto::Header h = ViewMessage(proto::PROMOTE, /*alive_only=*/true);
  h.set_rank(rank);
  h.mutable_replica()->set_epoch(epoch);
  promoting_.insert(next.info.id());
  Reply(next.identity, h);
  spdlog::warn("server rank {}: promoting backup node {} in place of node {} (epoch {})", rank,
               next.info.id(), old.info.id(), epoch);
}

void SchedulerLoop::OnPromoted(const Member& m, const proto::Header& h) {
  if (promoting_.erase(m.info.id()) == 0) return;
  if (h.type() == proto::ERROR) {
    spdlog::error("node {} could not take server rank {} over: {}", m.info.id(), m.info.rank(),
                  h.error_message());
    CancelDrain(*members_.ById(m.info.id()));
    return;
  }
  RetireDrained(m);  // before the workers hear of the new primary
  AnnounceServerBack(m);
  SendBackups(m.info.rank());  // the rank's other backups follow the new primary
  FinishDrain(m.info.rank(), Status(), &m);
}

}  // namespace hetps
