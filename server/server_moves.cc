// ServerLoop: live re-sharding (hetps ctl move; server_loop.h, docs/resharding.md).
//   source  MOVE from the scheduler: the named partitions' requests wait (deferred); each
//           partition's owner hands its whole state to the Mover after everything it took
//           before, which ships it to the target; once every target acknowledged, MOVED. A map
//           that places them elsewhere releases them and answers what waited with the epoch to
//           resend at; a call-off (or a failure) serves them again, starting with what waited.
//   target  MOVE_STATE from a source: the state is loaded on the network thread (nothing else
//           reaches the new partition yet), then listed and published on its owning thread,
//           checkpointed there with a data dir, and acknowledged. Updates it holds for rounds this
//           server closed already are applied at once; so is a resent update of such a round.
// Any later request for a partition that left is answered with the epoch that moved it.
// Under bsp, a worker's update can reach a partition's new rank after that rank closed its
// round (the worker's clock went there directly while the update waited at the source): it is
// applied at once (LateRound), as the round would have.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_loop.h"

namespace hetps {
namespace {

// A move whose targets did not all acknowledge, or whose map did not come, in this time is
// called off here (the partitions serve again from this server).
constexpr auto kMoveTimeout = std::chrono::seconds(60);

bool IsData(const proto::Header& h) {
  return h.type() == proto::PUSH || h.type() == proto::PULL || h.type() == proto::INIT;
}

}  // namespace

Status ServerLoop::CheckMove(const proto::Move& move) const {
  if (standby_ || !map_) {
    return Status::FailedPrecondition(standby_ ? "a backup holds no partitions of its own"
                                               : "no shard map installed yet");
  }
  if (move_out_) return Status::FailedPrecondition("a move from this server is in progress");
  if (drain_ || cut_) return Status::Unavailable("this server is draining or checkpointing");
  if (replicator_->active()) {
    return Status::FailedPrecondition("partitions of a replicated rank do not move yet");
  }
  if (gate_->synchronous() && gate_->consistency_spec().name() != "bsp") {
    return Status::FailedPrecondition(
        fmt::format("partitions move under asynchronous controllers and bsp, not under '{}'",
                    gate_->consistency()));
  }
  for (const proto::PartitionMove& e : move.entries()) {
    PartitionState* part = state_.store->Find(e.partition());
    if (part == nullptr || part->table() != nullptr) {
      return Status::FailedPrecondition(
          fmt::format("partition {} is not a dense partition held here", e.partition()));
    }
    bool known = false;
    for (const proto::NodeInfo& n : move.targets()) known = known || n.rank() == e.rank();
    if (!known || e.rank() == link_->rank()) {
      return Status::InvalidArgument(
          fmt::format("partition {} goes to rank {}, which the move names no server of",
                      e.partition(), e.rank()));
    }
  }
  return Status();
}

void ServerLoop::OnMove(const proto::Header& h) {
  if (h.move().abort()) {
    if (move_out_ && move_out_->request.move().id() == h.move().id()) {
      EndMove(Status::Aborted("the scheduler called the move off"));
    }
    if (!map_) return;
    for (const proto::PartitionMove& e : h.move().entries()) {  // a target's copies go
      const int32_t id = e.partition();
      if (id >= 0 && static_cast<size_t>(id) < map_->partitions().size() &&
          state_.store->Find(id) != nullptr &&
          Placement().partitions()[id].server_rank != link_->rank()) {
        Drop(id, Placement().epoch());
      }
    }
    return;
  }
  Status s = CheckMove(h.move());
  auto mover = std::make_shared<Mover>(ctx_, link_->id(), &options_.auth);
  for (const proto::NodeInfo& n : h.move().targets()) {
    if (s.ok()) s = mover->Connect(n);
  }
  if (!s.ok()) {
    spdlog::warn("move {} refused: {}", h.move().id(), s.message());
    return link_->Send(ErrorReply(h, s, link_->id()));
  }
  move_out_.emplace();
  move_out_->request = h;
  move_out_->mover = std::move(mover);
  move_out_->since = std::chrono::steady_clock::now();
  for (const proto::PartitionMove& e : h.move().entries()) {
    move_out_->partitions.insert(e.partition());
    int32_t to = -1;
    for (const proto::NodeInfo& n : h.move().targets()) {
      if (n.rank() == e.rank()) to = n.id();
    }
    PartitionState* part = state_.store->Find(e.partition());
    // On the owner, after every request it took before: the state holds each of them. The
    // task keeps the mover alive (the move may be called off before it runs).
    auto ship = [mover = move_out_->mover, part, to] {
      proto::PartitionCheckpoint checkpoint;
      part->Save(checkpoint);
      std::vector<uint8_t> bytes(checkpoint.ByteSizeLong());
      checkpoint.SerializeToArray(bytes.data(), static_cast<int>(bytes.size()));
      mover->Ship(to, part->info().id, std::move(bytes));
    };
    const int owner = Owner(part->info());
    if (owner == 0) {
      ship();
    } else {
      apply_threads_->Run(owner - 1, [ship](zmq::socket_t&) { ship(); });
    }
  }
  spdlog::info("move {}: shipping {} partition(s) to rank(s) of {} server(s)", h.move().id(),
               move_out_->partitions.size(), h.move().targets_size());
}

// Each turn: the mover's progress; MOVED once every target holds its partitions.
void ServerLoop::ProgressMove() {
  if (!move_out_) return;
  Status s = move_out_->mover->Pump();
  if (s.ok() && std::chrono::steady_clock::now() - move_out_->since > kMoveTimeout) {
    s = Status::DeadlineExceeded("the move did not complete in 60 s");
  }
  if (!s.ok()) {
    link_->Send(ErrorReply(move_out_->request, s, link_->id()));
    return EndMove(s);
  }
  if (move_out_->said ||
      move_out_->mover->acknowledged() < static_cast<int64_t>(move_out_->partitions.size())) {
    return;
  }
  move_out_->said = true;
  proto::Header r = ReplyTo(move_out_->request, proto::MOVED, link_->id());
  *r.mutable_move() = move_out_->request.move();
  r.mutable_move()->clear_targets();
  link_->Send(r);
  spdlog::info("move {}: every target holds its partitions ({:.1f} MiB sent); {} request(s) wait",
               move_out_->request.move().id(), move_out_->mover->bytes_sent() / 1048576.0,
               move_out_->deferred.size());
}

// The move failed or was called off: the partitions serve here again, what waited first.
void ServerLoop::EndMove(const Status& s) {
  if (!move_out_) return;
  std::deque<Envelope> deferred = std::move(move_out_->deferred);
  spdlog::warn("move {} ended without the new map ({}); serving its partitions again",
               move_out_->request.move().id(), s.message());
  move_out_.reset();
  ReleaseDeferred(std::move(deferred));
}

bool ServerLoop::DeferMoving(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (!move_out_ || !IsData(h) || !move_out_->partitions.contains(h.partition())) return false;
  move_out_->deferred.push_back(std::move(env));
  return true;
}

bool ServerLoop::AnswerMoved(const Envelope& env) {
  const proto::Header& h = env.message.header;
  if (!env.status.ok() || !IsData(h)) return false;
  auto it = moved_away_.find(h.partition());
  if (it == moved_away_.end() || state_.store->Find(h.partition()) != nullptr) return false;
  proto::Header r =
      ErrorReply(h,
                 Status::Unavailable(fmt::format(
                     "partition {} moved to server rank {} (shard map epoch {})", h.partition(),
                     Placement().partitions()[h.partition()].server_rank, it->second)),
                 link_->id());
  r.set_moved_epoch(it->second);
  Reply(env.identity, std::move(r));
  return true;
}

// A newer map from the scheduler: partitions it places elsewhere are released (a finished move,
// or a copy left by one called off), and what waited for them is answered with its epoch.
void ServerLoop::OnMapUpdate(const proto::ShardMap& proto_map) {
  auto next = ShardMapFromProto(proto_map);
  if (!next.ok() || next->partitions().size() != map_->partitions().size() ||
      next->num_servers() < Placement().num_servers()) {
    spdlog::error("a new shard map that is not this cluster's is ignored: {}",
                  next.ok() ? "another model" : next.status().ToString());
    return;
  }
  if (next->epoch() <= Placement().epoch()) {  // a repeat
    // From a restarted scheduler, after this server said MOVED: it never switched to a new map.
    if (move_out_ && move_out_->said) {
      EndMove(Status::Aborted(
          fmt::format("the scheduler's map (epoch {}) keeps them here", next->epoch())));
    }
    return;
  }
  placement_ = std::move(*next);
  const int64_t epoch = placement_->epoch();
  for (const Partition& p : placement_->partitions()) {
    const bool held = state_.store->Find(p.id) != nullptr;
    if (p.server_rank != link_->rank() && held) Drop(p.id, epoch);
    if (p.server_rank == link_->rank() && !held) {
      spdlog::error("the map of epoch {} places partition {} here, which never arrived", epoch,
                    p.id);
    }
  }
  if (move_out_) {
    std::deque<Envelope> deferred = std::move(move_out_->deferred);
    const bool done = std::ranges::all_of(move_out_->partitions, [&](int32_t id) {
      return placement_->partitions()[id].server_rank != link_->rank();
    });
    if (done) {
      spdlog::info(
          "move {}: the partitions serve from their new ranks (epoch {}); {} request(s) "
          "sent on",
          move_out_->request.move().id(), epoch, deferred.size());
      move_out_.reset();
    } else {
      EndMove(Status::Aborted(fmt::format("the map of epoch {} keeps them here", epoch)));
    }
    ReleaseDeferred(std::move(deferred));  // moved ones are answered with the epoch
  }
}

// Stops holding partition `id`: requests for it are answered "moved"; its owner drops it from
// its list and the state goes with that task.
void ServerLoop::Drop(int32_t id, int64_t epoch) {
  std::shared_ptr<PartitionState> part = state_.store->Release(id);
  moved_away_[id] = epoch;
  if (!part) return;
  const int owner = Owner(part->info());
  auto forget = [this, owner, id, part]() mutable {
    std::erase(state_.owned[owner], id);
    part.reset();
  };
  if (owner == 0) {
    forget();
  } else {
    apply_threads_->Run(owner - 1, [forget](zmq::socket_t&) mutable { forget(); });
  }
}

int32_t ServerLoop::LateFor(const DataRequest& request) const {
  const proto::Header& h = request.message.header;
  const bool late =
      request.hold && moved_in_.contains(h.partition()) && h.clock() < gate_->slowest_clock();
  return late ? h.partition() : -1;
}

void ServerLoop::LateRound(int32_t id, int owner) {
  RoundSpec round;
  round.clock = gate_->slowest_clock() - 1;
  auto apply = [this, id, round](zmq::socket_t&) {
    if (PartitionState* part = state_.store->Find(id)) ApplyRoundTo(state_, *part, round);
  };
  if (owner > 0) return apply_threads_->Run(owner - 1, apply);
  apply(*router_);
}

void ServerLoop::OnMoveState(Envelope& env) {
  const proto::Header& h = env.message.header;
  auto refuse = [&](const Status& s) {
    ++errors_;
    spdlog::warn("refused partition {} moved from node {}: {}", h.partition(), h.sender(),
                 s.ToString());
    SendRouted(*router_, env.identity, ErrorReply(h, s, link_->id()), {});
  };
  if (!env.status.ok()) return refuse(env.status);
  if (options_.auth.curve && options_.auth.RoleOf(env.peer) != KeyRole::kServer) {
    return refuse(Status::PermissionDenied("partitions are taken from server keys only"));
  }
  const proto::NodeInfo* from = link_->view().Node(h.sender());
  if (from == nullptr || from->role() != proto::SERVER ||
      !IsNodeIdentity(env.identity, h.sender())) {
    return refuse(Status::PermissionDenied(fmt::format("node {} is no server", h.sender())));
  }
  if (standby_ || !map_) return refuse(Status::Unavailable("not serving a rank"));
  const int32_t id = h.partition();
  if (id < 0 || static_cast<size_t>(id) >= map_->partitions().size() ||
      map_->tensors()[map_->partitions()[id].tensor_id].is_table()) {
    return refuse(Status::InvalidArgument(fmt::format("no dense partition {}", id)));
  }
  if (state_.store->Find(id) != nullptr &&
      Placement().partitions()[id].server_rank != link_->rank()) {
    Drop(id, Placement().epoch());  // a copy a called-off move left here: replaced
  }
  auto checkpoint = std::make_shared<proto::PartitionCheckpoint>();
  if (env.message.payload.size() != 1 ||
      !checkpoint->ParseFromArray(env.message.payload[0].data(),
                                  static_cast<int>(env.message.payload[0].size()))) {
    return refuse(Status::Malformed(fmt::format("an unreadable state of partition {}", id)));
  }
  const int64_t bytes = map_->partitions()[id].length * static_cast<int64_t>(sizeof(float));
  if (bytes > options_.max_partition_bytes) {
    return refuse(Status::FailedPrecondition(
        fmt::format("partition {} holds {} bytes, more than --max_partition_bytes={}", id, bytes,
                    options_.max_partition_bytes)));
  }
  auto made = state_.store->Make(map_->partitions()[id]);
  if (!made.ok()) return refuse(made.status());
  moved_away_.erase(id);
  Adopt(*made, std::move(checkpoint), env.identity, h);
}

// The moved-in state goes in on this thread (nothing else reaches the partition before it is
// published); its owner then lists it, applies what it holds for rounds closed here already,
// publishes it and acknowledges.
void ServerLoop::Adopt(PartitionState* part, std::shared_ptr<proto::PartitionCheckpoint> state,
                       const std::string& identity, const proto::Header& h) {
  const int32_t id = part->info().id;
  if (Status s = part->Load(*state); !s.ok()) {
    state_.store->Release(id);
    ++errors_;
    spdlog::warn("refused partition {} moved from node {}: {}", id, h.sender(), s.ToString());
    SendRouted(*router_, identity, ErrorReply(h, s, link_->id()), {});
    return;
  }
  state.reset();
  std::optional<RoundSpec> closed;
  if (gate_->synchronous() && part->held_clocks() > 0 && gate_->slowest_clock() > 0) {
    closed.emplace();
    closed->clock = gate_->slowest_clock() - 1;  // every live worker finished it
  }
  proto::Header ack = ReplyTo(h, proto::MOVE_STATE, link_->id());
  ack.set_partition(id);
  moved_in_.insert(id);
  const int owner = Owner(part->info());
  auto adopt = [this, owner, part, closed, identity, h, ack](zmq::socket_t& out) {
    state_.owned[owner].push_back(part->info().id);
    if (closed) ApplyRoundTo(state_, *part, *closed);
    state_.store->Publish(part);
    // With a data dir, the state is its first checkpoint here before the source lets it go: a
    // restart of this server after the switch restores it (its log follows from there).
    Status s = state_.durable ? state_.durable->Checkpoint(part->info().id, *part) : Status();
    SendRouted(out, identity, s.ok() ? ack : ErrorReply(h, s, link_->id()), {});
  };
  if (owner > 0) return apply_threads_->Run(owner - 1, adopt);
  adopt(*router_);
  spdlog::info("holding partition {} moved from node {} (version {})", id, h.sender(),
               part->version());
}

}  // namespace hetps
