// SchedulerLoop: live re-sharding (hetps ctl move; scheduler_loop.h, docs/resharding.md). An
// operator's MOVE names partitions and the ranks they go to; each source rank's server ships
// them to the targets while serving the rest (the moving partitions' requests wait there), and
// once every source says MOVED the map's next epoch places them on their new ranks: it is saved,
// then broadcast to every server and worker. A source or target that dies, a refusal, or 90 s
// without the sources' word call the move off: the sources serve the partitions again.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "scheduler/scheduler_loop.h"

namespace hetps {
namespace {

constexpr double kMoveSeconds = 90;

}  // namespace

// What a move needs of the cluster.
Status SchedulerLoop::CheckMovable() const {
  if (!map_) return Status::Unavailable("the cluster has not started (no shard map yet)");
  if (move_) return Status::FailedPrecondition("another move is in progress");
  if (!drains_.empty()) return Status::FailedPrecondition("a server rank is being drained");
  if (members_.replicas() > 0) {
    return Status::FailedPrecondition(
        "partitions of replicated ranks (--replicas) do not move yet (docs/resharding.md)");
  }
  for (const Member* m : members_.Alive()) {
    if (m->info.role() == proto::AGGREGATOR) {
      return Status::FailedPrecondition(
          "partitions do not move while aggregators sum pushes (docs/resharding.md)");
    }
  }
  return Status();
}

// What a move needs of the cluster, and of each entry.
Status SchedulerLoop::CheckMove(const proto::Move& move) const {
  if (Status s = CheckMovable(); !s.ok()) return s;
  if (move.entries().empty()) return Status::InvalidArgument("no partitions to move");
  std::map<int32_t, int32_t> entries;
  for (const proto::PartitionMove& e : move.entries()) {
    if (!entries.emplace(e.partition(), e.rank()).second) {
      return Status::InvalidArgument(fmt::format("partition {} is named twice", e.partition()));
    }
  }
  if (auto next = map_->WithMoves(entries); !next.ok()) return next.status();
  for (const auto& [id, rank] : entries) {
    const int32_t from = map_->partitions()[id].server_rank;
    if (from == rank) {
      return Status::InvalidArgument(fmt::format("partition {} is on rank {} already", id, rank));
    }
    for (int32_t r : {from, rank}) {
      const Member* primary = members_.Primary(r);
      if (primary == nullptr || primary->state != Member::State::kAlive || !primary->has_map) {
        return Status::Unavailable(fmt::format("server rank {} has no live server", r));
      }
    }
  }
  return Status();
}

void SchedulerLoop::StartMove(const Envelope& env) {
  const proto::Header& h = env.message.header;
  if (Status s = CheckMove(h.move()); !s.ok()) {
    spdlog::warn("move refused: {}", s.message());
    return Reply(env.identity, ErrorReply(h, s, kSchedulerId));
  }
  std::map<int32_t, int32_t> entries;
  for (const proto::PartitionMove& e : h.move().entries()) entries[e.partition()] = e.rank();
  BeginMove(entries, {-1, h.request_id(), env.identity});
}

// Sends each source rank's server its part of the move (checked by the caller). `retire`: a
// rank to retire once its partitions moved (a drain); `requester` with no identity: nobody
// waits for the answer (a rebalance onto a new rank).
void SchedulerLoop::BeginMove(const std::map<int32_t, int32_t>& entries, const Arrival& requester,
                              int32_t retire) {
  PendingMove& move = move_.emplace();
  move.id = next_move_++;
  move.requester = requester;
  move.retire = retire;
  move.since = Now();
  move.entries = entries;
  std::map<int32_t, proto::Move> by_source;  // node id -> its part of the move
  for (const auto& [partition, rank] : entries) {
    const Member* source = members_.Primary(map_->partitions()[partition].server_rank);
    const Member* target = members_.Primary(rank);
    if (source == nullptr || target == nullptr) {  // checked by the callers; never on a null
      return EndMove(Status::Unavailable(
          fmt::format("partition {}: rank {} or {} has no live server", partition,
                      map_->partitions()[partition].server_rank, rank)));
    }
    proto::Move& part = by_source[source->info.id()];
    proto::PartitionMove* e = part.add_entries();
    e->set_partition(partition);
    e->set_rank(rank);
    bool named = false;
    for (const proto::NodeInfo& n : part.targets()) named = named || n.id() == target->info.id();
    if (!named) *part.add_targets() = target->info;
    move.nodes.insert({source->info.id(), target->info.id()});
  }
  for (auto& [node, part] : by_source) {
    part.set_id(move.id);
    proto::Header m;
    m.set_type(proto::MOVE);
    m.set_sender(kSchedulerId);
    m.set_request_id(move.id);
    *m.mutable_move() = part;
    Reply(members_.ById(node)->identity, m);
    move.sources.insert(node);
  }
  spdlog::info("move {}: {} partition(s) from {} server(s){}", move.id, move.entries.size(),
               move.sources.size(),
               retire >= 0 ? fmt::format(", retiring rank {}", retire) : std::string());
  if (move.sources.empty()) OnMoved(Member{}, proto::Header{});  // nothing to ship: commit
}

void SchedulerLoop::OnMoved(const Member& source, const proto::Header& h) {
  if (!move_ || (!move_->sources.empty() &&
                 (h.request_id() != move_->id || !move_->sources.erase(source.info.id())))) {
    return;
  }
  if (h.type() == proto::ERROR) {
    return EndMove(Status(StatusOf(h).code(), fmt::format("server node {}: {}", source.info.id(),
                                                          StatusOf(h).message())));
  }
  if (!move_->sources.empty()) return;
  auto next = map_->WithMoves(move_->entries);
  if (next.ok() && move_->retire >= 0) {
    std::set<int32_t> retired = next->retired();
    retired.insert(move_->retire);
    next = next->WithRanks(next->num_servers(), retired);
  }
  if (!next.ok()) return EndMove(next.status());  // checked at the start; cannot happen
  map_ = std::move(*next);
  Save();  // before anyone serves from it
  proto::Header update;
  update.set_type(proto::SHARD_MAP);
  update.set_sender(kSchedulerId);
  *update.mutable_shard_map() = ToProto(*map_);
  for (const Member* alive : members_.Alive()) {
    Member& m = *members_.ById(alive->info.id());
    if (m.info.role() == proto::SERVER || m.info.role() == proto::WORKER) {
      Reply(m.identity, update);
      m.map_epoch = map_->epoch();
    }
  }
  spdlog::info("move {}: {} partition(s) moved in {:.3f} s; shard map epoch {}", move_->id,
               move_->entries.size(), Now() - move_->since, map_->epoch());
  const PendingMove done = std::move(*move_);
  move_.reset();
  if (done.retire >= 0) RetireRank(done);
  MaybeRebalance();
  if (done.retire >= 0) return;
  if (done.requester.identity.empty()) return;
  proto::Header r;
  r.set_request_id(done.requester.request_id);
  r = ReplyTo(r, proto::MOVE, kSchedulerId);
  r.mutable_move()->set_id(done.id);
  r.mutable_move()->set_epoch(map_->epoch());
  Reply(done.requester.identity, r);
}

// Called off: every source still alive serves its partitions again, every target drops what it
// loaded of them; the operator hears why.
void SchedulerLoop::EndMove(const Status& s) {
  if (!move_) return;
  std::set<int32_t> nodes;
  for (const auto& [source, target] : move_->nodes) nodes.insert({source, target});
  for (int32_t id : nodes) {
    const Member* m = members_.ById(id);
    if (m == nullptr || m->state != Member::State::kAlive) continue;
    proto::Header abort;
    abort.set_type(proto::MOVE);
    abort.set_sender(kSchedulerId);
    abort.set_request_id(move_->id);
    abort.mutable_move()->set_id(move_->id);
    abort.mutable_move()->set_abort(true);
    for (const auto& [partition, rank] : move_->entries) {
      proto::PartitionMove* e = abort.mutable_move()->add_entries();
      e->set_partition(partition);
      e->set_rank(rank);
    }
    Reply(m->identity, abort);
  }
  spdlog::error("move {} called off: {}", move_->id, s.message());
  if (!move_->requester.identity.empty()) {
    proto::Header req;
    req.set_request_id(move_->requester.request_id);
    Reply(move_->requester.identity, ErrorReply(req, s, kSchedulerId));
  }
  move_.reset();
  MaybeRebalance();
}

// A node behind the map's epoch (it joined, or this scheduler restarted, after a move) hears the
// map again with its next heartbeat: a source whose move this scheduler saved but could not
// broadcast (it died in between) finishes it; every node ignores an epoch it holds.
void SchedulerLoop::ResendMap(Member& m) {
  if (!map_ || map_->epoch() == 0 || m.map_epoch >= map_->epoch()) return;
  if (m.info.role() != proto::SERVER && m.info.role() != proto::WORKER) return;
  if (m.info.role() == proto::SERVER && !m.has_map) return;  // its install comes first
  proto::Header update;
  update.set_type(proto::SHARD_MAP);
  update.set_sender(kSchedulerId);
  *update.mutable_shard_map() = ToProto(*map_);
  Reply(m.identity, update);
  m.map_epoch = map_->epoch();
}

void SchedulerLoop::ExpireMove() {
  if (!move_) return;
  for (const auto& [source, target] : move_->nodes) {
    for (int32_t id : {source, target}) {
      const Member* m = members_.ById(id);
      if (m == nullptr || m->state != Member::State::kAlive) {
        return EndMove(Status::Unavailable(fmt::format("server node {} died during the move", id)));
      }
    }
  }
  if (Now() - move_->since > kMoveSeconds) {
    EndMove(Status::DeadlineExceeded(
        fmt::format("the sources did not ship every partition in {:.0f} s", kMoveSeconds)));
  }
}

// Elastic ranks (--max_servers). A drained rank's partitions moved off and the map retired it:
// its server is told to stop, the operator (or the stopping server) hears which rank went.
void SchedulerLoop::RetireRank(const PendingMove& done) {
  Member* old = members_.Primary(done.retire) != nullptr
                    ? members_.ById(members_.Primary(done.retire)->info.id())
                    : nullptr;
  if (old != nullptr && old->state == Member::State::kAlive) {
    proto::Header bye;
    bye.set_type(proto::SHUTDOWN);
    bye.set_sender(kSchedulerId);
    Reply(old->identity, bye);
    members_.MarkDead(old->info.id());
    Depart(old->info.id());  // nothing is routed to it any more: the workers forget it
  }
  spdlog::warn("server rank {} retired: its {} partition(s) serve from other ranks (epoch {})",
               done.retire, done.entries.size(), map_->epoch());
  if (done.requester.identity.empty()) return;
  const Member* requester = members_.ByIdentity(done.requester.identity);
  if (requester != nullptr && requester->state != Member::State::kAlive) return;  // it stopped
  proto::Header req;
  req.set_request_id(done.requester.request_id);
  proto::Header r = ReplyTo(req, proto::DRAIN, kSchedulerId);
  r.set_rank(done.retire);
  r.set_node(-1);
  r.mutable_move()->set_epoch(map_->epoch());
  Reply(done.requester.identity, r);
}

// Where a drained rank's partitions go: largest first onto the least loaded serving rank.
StatusOr<std::map<int32_t, int32_t>> SchedulerLoop::DrainMoves(int32_t rank) const {
  std::map<int32_t, int64_t> load;
  for (int32_t r = 0; r < map_->num_servers(); ++r) {
    const Member* primary = members_.Primary(r);
    if (r != rank && map_->serving(r) && primary != nullptr && primary->has_map) load[r] = 0;
  }
  if (load.empty())
    return Status::FailedPrecondition("no other rank is left to take its partitions");
  std::vector<const Partition*> off;
  for (const Partition& p : map_->partitions()) {
    if (load.contains(p.server_rank)) load[p.server_rank] += p.length;
    if (p.server_rank != rank) continue;
    if (map_->tensors()[p.tensor_id].is_table()) {
      return Status::FailedPrecondition(
          fmt::format("rank {} holds buckets of table '{}', which do not move", rank,
                      map_->tensors()[p.tensor_id].name));
    }
    off.push_back(&p);
  }
  std::stable_sort(off.begin(), off.end(),
                   [](const Partition* a, const Partition* b) { return a->length > b->length; });
  std::map<int32_t, int32_t> moves;
  for (const Partition* p : off) {
    auto to = std::min_element(load.begin(), load.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
    moves[p->id] = to->first;
    to->second += p->length;
  }
  return moves;
}

namespace {

// One partition for the new rank `rank`: the largest of the most loaded rank that has one which
// brings `rank` no further above the mean than it is below, and leaves its rank no lighter
// than `rank`. Null when no rank has one.
const Partition* TakeFor(int32_t rank, int64_t mean, std::map<int32_t, int64_t>& load,
                         std::map<int32_t, std::vector<const Partition*>>& held) {
  std::vector<int32_t> order;
  for (const auto& [r, l] : load) {
    if (r != rank) order.push_back(r);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return load[a] > load[b]; });
  for (int32_t from : order) {
    for (auto it = held[from].begin(); it != held[from].end(); ++it) {
      const int64_t after = load[rank] + (*it)->length;
      if (after - mean > mean - load[rank] || load[from] - (*it)->length < after) continue;
      const Partition* p = *it;
      load[rank] = after;
      load[from] -= p->length;
      held[from].erase(it);
      return p;
    }
  }
  return nullptr;
}

}  // namespace

// A rank new to the map takes partitions, largest first from the most loaded ranks, while each
// brings it closer to the mean (TakeFor). A model of a few large partitions may give it none.
std::map<int32_t, int32_t> SchedulerLoop::RebalanceMoves(int32_t rank) const {
  std::map<int32_t, int64_t> load;
  std::map<int32_t, std::vector<const Partition*>> held;
  int64_t total = 0;
  for (int32_t r = 0; r < map_->num_servers(); ++r) {
    if (map_->serving(r)) load[r] = 0;
  }
  for (const Partition& p : map_->partitions()) {
    load[p.server_rank] += p.length;
    total += p.length;
    // Only from a rank whose server is up to ship them (one restarting keeps its own).
    const Member* source = members_.Primary(p.server_rank);
    if (!map_->tensors()[p.tensor_id].is_table() && source != nullptr && source->has_map) {
      held[p.server_rank].push_back(&p);
    }
  }
  for (auto& [r, parts] : held) {
    std::stable_sort(parts.begin(), parts.end(),
                     [](const Partition* a, const Partition* b) { return a->length > b->length; });
  }
  const int64_t mean = total / static_cast<int64_t>(load.size());
  std::map<int32_t, int32_t> moves;
  while (const Partition* p = TakeFor(rank, mean, load, held)) moves[p->id] = rank;
  if (moves.empty()) {
    spdlog::warn(
        "server rank {}: no partition would bring it closer to the mean load; move "
        "some by hand (hetps ctl move), or use smaller partitions (--partition_bytes)",
        rank);
  }
  return moves;
}

// A server that joined past the ranks the cluster had: once it installed the map of the grown
// cluster (no partitions yet), everyone learns its address and the new map, and partitions move
// to it.
void SchedulerLoop::AdmitNewRank(const Envelope& env, Member& m) {
  Reply(env.identity, ViewMessage(proto::CLUSTER_VIEW, /*alive_only=*/true));
  spdlog::info("server rank {} added (node {} at {})", m.info.rank(), m.info.id(),
               m.info.address());
  if (!map_) {  // the map, when it is built, places partitions over every rank
    members_.Announced(m);
    return AnnounceServerBack(m);
  }
  auto grown = map_->WithRanks(members_.num_servers(), map_->retired());
  if (!grown.ok()) {
    spdlog::error("cannot add rank {} to the map: {}", m.info.rank(), grown.status().message());
    return;
  }
  map_ = std::move(*grown);
  Save();
  proto::Header h;
  h.set_type(proto::SHARD_MAP);
  h.set_sender(kSchedulerId);
  *h.mutable_shard_map() = ToProto(*map_);
  growing_.insert(m.info.id());
  Reply(env.identity, h);
  m.map_epoch = map_->epoch();
}

// A rank that joined (or came back from retirement) gets partitions, one move at a time: now, or
// once the move under way ended. A rebalance that is called off is not tried again (hetps ctl
// move places partitions by hand).
void SchedulerLoop::MaybeRebalance() {
  for (auto it = to_fill_.begin(); !move_ && map_ && it != to_fill_.end();) {
    const int32_t r = *it;
    const Member* primary = members_.Primary(r);
    if (!map_->serving(r) || primary == nullptr) {
      it = to_fill_.erase(it);  // gone meanwhile
      continue;
    }
    if (!primary->has_map || members_.NewRank(*primary)) {
      ++it;  // still installing the map
      continue;
    }
    std::map<int32_t, int32_t> moves = RebalanceMoves(r);
    it = to_fill_.erase(it);
    if (!moves.empty()) BeginMove(moves, Arrival{});
  }
}

void SchedulerLoop::AnnounceNewRank(Member& m) {
  members_.Announced(m);
  AnnounceServerBack(m);  // its address: the workers connect to it
  proto::Header update;
  update.set_type(proto::SHARD_MAP);
  update.set_sender(kSchedulerId);
  *update.mutable_shard_map() = ToProto(*map_);
  for (const Member* alive : members_.Alive()) {
    Member& n = *members_.ById(alive->info.id());
    if (n.map_epoch >= map_->epoch()) continue;
    if (n.info.role() != proto::SERVER && n.info.role() != proto::WORKER) continue;
    Reply(n.identity, update);
    n.map_epoch = map_->epoch();
  }
  to_fill_.insert(m.info.rank());
  MaybeRebalance();  // or once the move under way ends
}

}  // namespace hetps
