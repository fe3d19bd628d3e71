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

// What a move needs of the cluster, and of each entry.
Status SchedulerLoop::CheckMove(const proto::Move& move) const {
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
  PendingMove& move = move_.emplace();
  move.id = next_move_++;
  move.requester = {-1, h.request_id(), env.identity};
  move.since = Now();
  std::map<int32_t, proto::Move> by_source;  // node id -> its part of the move
  for (const proto::PartitionMove& e : h.move().entries()) {
    move.entries[e.partition()] = e.rank();
    const Member* source = members_.Primary(map_->partitions()[e.partition()].server_rank);
    const Member* target = members_.Primary(e.rank());
    proto::Move& part = by_source[source->info.id()];
    *part.add_entries() = e;
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
  spdlog::info("move {}: {} partition(s) from {} server(s)", move.id, move.entries.size(),
               move.sources.size());
}

void SchedulerLoop::OnMoved(const Member& source, const proto::Header& h) {
  if (!move_ || h.request_id() != move_->id || !move_->sources.erase(source.info.id())) return;
  if (h.type() == proto::ERROR) {
    return EndMove(Status(StatusOf(h).code(), fmt::format("server node {}: {}", source.info.id(),
                                                          StatusOf(h).message())));
  }
  if (!move_->sources.empty()) return;
  auto next = map_->WithMoves(move_->entries);
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
  proto::Header r;
  r.set_request_id(move_->requester.request_id);
  r = ReplyTo(r, proto::MOVE, kSchedulerId);
  r.mutable_move()->set_id(move_->id);
  r.mutable_move()->set_epoch(map_->epoch());
  Reply(move_->requester.identity, r);
  move_.reset();
}

// Called off: every source still alive serves its partitions again; the operator hears why.
void SchedulerLoop::EndMove(const Status& s) {
  if (!move_) return;
  std::set<int32_t> sources;
  for (const auto& [source, target] : move_->nodes) sources.insert(source);
  for (int32_t id : sources) {
    const Member* m = members_.ById(id);
    if (m == nullptr || m->state != Member::State::kAlive) continue;
    proto::Header abort;
    abort.set_type(proto::MOVE);
    abort.set_sender(kSchedulerId);
    abort.set_request_id(move_->id);
    abort.mutable_move()->set_id(move_->id);
    abort.mutable_move()->set_abort(true);
    Reply(m->identity, abort);
  }
  spdlog::error("move {} called off: {}", move_->id, s.message());
  proto::Header req;
  req.set_request_id(move_->requester.request_id);
  Reply(move_->requester.identity, ErrorReply(req, s, kSchedulerId));
  move_.reset();
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

}  // namespace hetps
