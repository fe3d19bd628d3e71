#include "scheduler/membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hetps {

Membership::Membership(int num_servers, int num_workers, int max_workers, int num_aggregators)
    : num_servers_(num_servers),
      num_workers_(num_workers),
      max_workers_(max_workers),
      num_aggregators_(num_aggregators) {}

StatusOr<const Member*> Membership::Register(const std::string& identity,
                                             const proto::Header& request, SteadyTime now) {
  if (Member* m = ByIdentity(identity)) return static_cast<const Member*>(m);
  const proto::Role role = request.role();
  if (role == proto::AGGREGATOR) return RegisterAggregator(identity, request, now);
  if (role != proto::SERVER && role != proto::WORKER) {
    return Status::InvalidArgument(fmt::format("cannot register role {}", proto::Role_Name(role)));
  }
  if (role == proto::SERVER && request.address().empty()) {
    return Status::InvalidArgument("a server must register with the address workers dial");
  }
  if (role == proto::SERVER && request.replica().standby()) {
    return RegisterStandby(identity, request, now);
  }
  if (role == proto::WORKER && complete()) return JoinLate(identity, request, now);
  int& count = role == proto::SERVER ? servers_ : workers_;
  const int expected = role == proto::SERVER ? num_servers_ : num_workers_;
  const char* plural = role == proto::SERVER ? "servers" : "workers";
  if (role == proto::SERVER && request.has_rank() && server_ranks_.contains(request.rank()) &&
      complete()) {
    if (Member* dead = DeadServer(request.rank())) return TakeOver(*dead, identity, request, now);
    if (replicas_ > 0 && Primary(request.rank()) != nullptr && Primary(request.rank())->took_over) {
      // Its rank failed over while it was away (its data dir is behind the new primary): it
      // backs up a rank instead, as a standby would (an orchestrator's restart policy brings a
      // killed primary back as its rank's backup).
      proto::Header as_backup = request;
      as_backup.mutable_replica()->set_standby(true);
      auto own = RegisterStandby(identity, as_backup, now);  // its own rank, if that lacks one
      if (own.ok() || own.status().code() != StatusCode::kUnavailable) return own;
      as_backup.clear_rank();
      return RegisterStandby(identity, as_backup, now);
    }
    // A server restarted faster than failure detection: it may take the rank once the old
    // one is declared dead, so it is told to retry.
    return Status::Unavailable(
        fmt::format("server rank {} is still held by a live server; retry once it is declared dead",
                    request.rank()));
  }
  if (role == proto::SERVER && complete() && count >= expected && max_servers_ > num_servers_ &&
      (!request.has_rank() || request.rank() >= num_servers_)) {
    Member& m = Add(identity, request, num_servers_, now);
    server_ranks_.insert(num_servers_++);
    ++servers_;
    m.new_rank = true;
    return static_cast<const Member*>(&m);
  }
  if (count >= expected) {
    return Status::FailedPrecondition(
        fmt::format("the cluster already has its {} {}", expected, plural));
  }
  std::set<int32_t>& taken = role == proto::SERVER ? server_ranks_ : worker_ranks_;
  int32_t rank = 0;
  if (request.has_rank()) {  // asked for (hetps launch numbers its workers)
    rank = request.rank();
    if (rank < 0 || rank >= expected) {
      return Status::InvalidArgument(
          fmt::format("rank {} asked for, but the cluster has {} {} (0..{})", rank, expected,
                      plural, expected - 1));
    }
    if (taken.contains(rank)) {
      return Status::FailedPrecondition(fmt::format("rank {} is already taken", rank));
    }
  } else {
    while (taken.contains(rank)) ++rank;
  }
  taken.insert(rank);
  ++count;
  return static_cast<const Member*>(&Add(identity, request, rank, now));
}

// Aggregators (docs/aggregation-tier.md) form with the cluster: the workers choose theirs from
// the view they start with. One that dies is not replaced: its workers push to the servers.
StatusOr<const Member*> Membership::RegisterAggregator(const std::string& identity,
                                                       const proto::Header& request,
                                                       SteadyTime now) {
  if (request.address().empty()) {
    return Status::InvalidArgument("an aggregator must register with the address workers dial");
  }
  if (aggregators_ >= num_aggregators_) {
    return Status::FailedPrecondition(fmt::format(
        "the cluster takes {} aggregator(s) (the scheduler's --aggregators), and has them",
        num_aggregators_));
  }
  if (complete()) {
    return Status::FailedPrecondition("the cluster formed already; aggregators join before");
  }
  return static_cast<const Member*>(&Add(identity, request, aggregators_++, now));
}

StatusOr<const Member*> Membership::RegisterStandby(const std::string& identity,
                                                    const proto::Header& request, SteadyTime now) {
  if (replicas_ <= 0) {
    return Status::FailedPrecondition(
        "this cluster keeps no backups: start the scheduler with --replicas=R to take standbys");
  }
  std::vector<int> backups(static_cast<size_t>(num_servers_), 0);
  for (const Member& m : members_) {
    if (m.info.standby() && m.state == Member::State::kAlive) ++backups[m.info.rank()];
  }
  int32_t rank = 0;
  if (request.has_rank()) {
    rank = request.rank();
    if (rank < 0 || rank >= num_servers_) {
      return Status::InvalidArgument(fmt::format(
          "a backup of rank {} asked for, but the cluster has {} servers", rank, num_servers_));
    }
  } else {
    rank = static_cast<int32_t>(std::min_element(backups.begin(), backups.end()) - backups.begin());
  }
  if (backups[rank] >= replicas_) {
    // Unavailable: a backup that is about to be declared dead (or promoted) frees a place, so
    // the standby asks again.
    return Status::Unavailable(fmt::format(
        "server rank {} has its {} backup(s) already (--replicas); retry once one is gone", rank,
        replicas_));
  }
  Member& m = Add(identity, request, rank, now);
  m.info.set_standby(true);
  return static_cast<const Member*>(&m);
}

const Member* Membership::Primary(int32_t rank) const {
  for (const Member& m : members_) {
    if (m.info.role() == proto::SERVER && !m.info.standby() && m.info.rank() == rank &&
        m.state == Member::State::kAlive && !m.superseded) {
      return &m;
    }
  }
  return nullptr;
}

std::vector<Member*> Membership::Backups(int32_t rank) {
  std::vector<Member*> out;
  for (Member& m : members_) {
    if (m.info.standby() && m.info.rank() == rank && m.state == Member::State::kAlive) {
      out.push_back(&m);
    }
  }
  return out;
}

void Membership::Promote(Member& backup, Member& dead) {
  dead.superseded = true;
  backup.info.set_standby(false);
  backup.took_over = true;
  backup.replaces = dead.info.id();
}

void Membership::Demote(Member& backup, Member& primary) {
  primary.superseded = false;
  backup.info.set_standby(true);
  backup.took_over = false;
  backup.replaces = 0;
}

Member& Membership::Add(const std::string& identity, const proto::Header& request, int32_t rank,
                        SteadyTime now) {
  Member m;
  m.info.set_id(static_cast<int32_t>(members_.size()) + 1);
  m.info.set_role(request.role());
  m.info.set_rank(rank);
  m.info.set_address(request.address());
  m.info.set_host(request.host());
  m.info.set_pid(request.pid());
  if (request.role() == proto::AGGREGATOR && request.has_switch_spec()) {
    *m.info.mutable_switch_spec() = request.switch_spec();
  }
  m.identity = identity;
  m.last_seen = now;
  by_identity_.emplace(identity, members_.size());
  members_.push_back(std::move(m));
  return members_.back();
}

StatusOr<const Member*> Membership::JoinLate(const std::string& identity,
                                             const proto::Header& request, SteadyTime now) {
  // Who holds each worker rank now: the newest member with it that nobody superseded.
  std::map<int32_t, Member*> holder;
  int live = 0;
  for (Member& m : members_) {
    if (m.info.role() != proto::WORKER || m.superseded) continue;
    holder[m.info.rank()] = &m;
    live += m.state == Member::State::kAlive;
  }
  if (live >= max_workers_) {
    return Status::FailedPrecondition(
        fmt::format("the cluster already runs its maximum of {} workers", max_workers_));
  }
  int32_t rank = 0;
  if (request.has_rank()) {
    rank = request.rank();
    if (rank < 0 || rank >= max_workers_) {
      return Status::InvalidArgument(
          fmt::format("rank {} asked for, but the cluster takes at most {} workers (0..{})", rank,
                      max_workers_, max_workers_ - 1));
    }
    auto it = holder.find(rank);
    if (it != holder.end() && it->second->state == Member::State::kAlive) {
      // A worker restarted faster than failure detection: it may take the rank once the old
      // one is declared dead.
      return Status::Unavailable(fmt::format(
          "worker rank {} is still held by a live worker; retry once it is declared dead", rank));
    }
  } else {  // the smallest rank no live or dead worker holds (a dead one may come back)
    while (holder.contains(rank) && holder.at(rank)->state != Member::State::kLeft) ++rank;
  }
  if (auto it = holder.find(rank); it != holder.end()) it->second->superseded = true;
  Member& m = Add(identity, request, rank, now);
  m.joined_late = true;
  return static_cast<const Member*>(&m);
}

std::vector<proto::SchedulerMember> Membership::Save() const {
  std::vector<proto::SchedulerMember> out;
  for (const Member& m : members_) {
    proto::SchedulerMember& r = out.emplace_back();
    *r.mutable_info() = m.info;
    r.set_identity(m.identity);
    r.set_state(static_cast<int32_t>(m.state));
    r.set_took_over(m.took_over);
    r.set_joined_late(m.joined_late);
    r.set_superseded(m.superseded);
  }
  return out;
}

Status Membership::Restore(const std::vector<proto::SchedulerMember>& records, SteadyTime now) {
  members_.clear();
  by_identity_.clear();
  servers_ = workers_ = aggregators_ = 0;
  server_ranks_.clear();
  worker_ranks_.clear();
  for (const proto::SchedulerMember& r : records) {
    if (r.info().id() != static_cast<int32_t>(members_.size()) + 1 || r.state() < 0 ||
        r.state() > 2 ||
        (r.info().role() != proto::SERVER && r.info().role() != proto::WORKER &&
         r.info().role() != proto::AGGREGATOR)) {
      return Status::Malformed(fmt::format("member record {} is damaged", members_.size() + 1));
    }
    Member m;
    m.info = r.info();
    m.identity = r.identity();
    m.state = static_cast<Member::State>(r.state());
    m.took_over = r.took_over();
    m.joined_late = r.joined_late();
    m.superseded = r.superseded();
    m.last_seen = now;
    // The counts of the forming cluster: every first registration of a rank.
    if (m.info.role() == proto::AGGREGATOR) {
      ++aggregators_;
    } else if (!m.took_over && !m.joined_late && !m.info.standby()) {
      const bool server = m.info.role() == proto::SERVER;
      (server ? servers_ : workers_)++;
      (server ? server_ranks_ : worker_ranks_).insert(m.info.rank());
      // A rank the cluster grew to (docs/resharding.md) counts as one it has.
      if (server) num_servers_ = std::max(num_servers_, m.info.rank() + 1);
    }
    by_identity_.emplace(m.identity, members_.size());
    members_.push_back(std::move(m));
  }
  return Status();
}

Member* Membership::DeadServer(int32_t rank) {
  Member* found = nullptr;
  for (Member& m : members_) {
    if (m.info.role() != proto::SERVER || m.info.rank() != rank || m.superseded ||
        m.info.standby()) {
      continue;
    }
    if (m.state != Member::State::kDead) return nullptr;  // held by a live (or left) server
    found = &m;
  }
  return found;
}

const Member* Membership::TakeOver(Member& dead, const std::string& identity,
                                   const proto::Header& request, SteadyTime now) {
  dead.superseded = true;
  Member& m = Add(identity, request, dead.info.rank(), now);
  m.took_over = true;
  m.replaces = dead.info.id();
  return &m;
}

proto::ClusterView Membership::View(bool alive_only) const {
  proto::ClusterView view;
  for (const Member& m : members_) {
    if (m.superseded || m.info.standby() || (alive_only && m.state != Member::State::kAlive)) {
      continue;
    }
    *view.add_nodes() = m.info;
  }
  view.set_num_servers(num_servers_);
  view.set_num_workers(num_workers_);
  view.set_max_workers(max_workers_);
  view.set_max_servers(max_servers_);
  return view;
}

Member* Membership::ByIdentity(const std::string& identity) {
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? nullptr : &members_[it->second];
}

Member* Membership::ById(int32_t id) {
  return id >= 1 && static_cast<size_t>(id) <= members_.size() ? &members_[id - 1] : nullptr;
}

Member* Membership::Touch(const std::string& identity, SteadyTime now) {
  Member* m = ByIdentity(identity);
  if (m != nullptr) m->last_seen = now;
  return m;
}

std::vector<int32_t> Membership::ExpireSilent(SteadyTime now, std::chrono::milliseconds timeout) {
  std::vector<int32_t> dead;
  for (Member& m : members_) {
    if (m.state == Member::State::kAlive && now - m.last_seen > timeout) {
      m.state = Member::State::kDead;
      dead.push_back(m.info.id());
    }
  }
  return dead;
}

void Membership::MarkLeft(int32_t id) {
  if (Member* m = ById(id); m != nullptr && m->state == Member::State::kAlive) {
    m->state = Member::State::kLeft;
  }
}

void Membership::MarkDead(int32_t id) {
  if (Member* m = ById(id); m != nullptr && m->state == Member::State::kAlive) {
    m->state = Member::State::kDead;
  }
}

std::vector<const Member*> Membership::Alive() const {
  std::vector<const Member*> alive;
  for (const Member& m : members_) {
    if (m.state == Member::State::kAlive) alive.push_back(&m);
  }
  return alive;
}

std::vector<int32_t> Membership::LiveWorkers() const {
  std::vector<int32_t> ids;
  for (const Member& m : members_) {
    if (m.state == Member::State::kAlive && m.info.role() == proto::WORKER)
      ids.push_back(m.info.id());
  }
  return ids;
}

std::vector<int32_t> Membership::LiveServers() const {
  std::vector<int32_t> ids;
  for (const Member& m : members_) {
    if (m.state == Member::State::kAlive && m.info.role() == proto::SERVER && !m.info.standby())
      ids.push_back(m.info.id());
  }
  return ids;
}

bool Membership::AllWorkersDone() const {
  return workers_ == num_workers_ && LiveWorkers().empty();
}

}  // namespace hetps
