// ServerLoop: the workers' requests, checked, gated, served and answered (server_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_loop.h"
#include "server/table/table_serving.h"

namespace hetps {

Status ServerLoop::CheckSender(const Envelope& env) const {
  // With keys, the connection's key is held to the allow-list as it is now: ZeroMQ checks it
  // only at the handshake, and a key removed since (SIGHUP) is refused from its next message.
  if (options_.auth.curve && options_.auth.RoleOf(env.peer) != KeyRole::kWorker) {
    return Status::PermissionDenied(
        "this connection's key is no longer a worker key of the allow-list");
  }
  const int32_t sender = env.message.header.sender();
  const proto::NodeInfo* node = link_->view().Node(sender);
  if (node != nullptr && node->role() == proto::AGGREGATOR &&
      IsNodeIdentity(env.identity, sender) && !dead_.contains(sender)) {
    if (options_.auth.curve && node->public_key() != env.peer) {
      return Status::PermissionDenied(
          fmt::format("aggregator {} registered with another key than this connection's", sender));
    }
    return CheckAggregated(env.message.header);
  }
  if (!env.message.header.contributions().empty() || env.message.header.has_chunk()) {
    return Status::PermissionDenied(
        fmt::format("node {} sent a sum of pushes, which only an aggregator may", sender));
  }
  if (node == nullptr || node->role() != proto::WORKER || !IsNodeIdentity(env.identity, sender)) {
    return Status::Unregistered(
        fmt::format("node {} is not a registered worker of this cluster", sender));
  }
  if (dead_.contains(sender)) {
    return Status::Unregistered(fmt::format("node {} was declared dead", sender));
  }
  // With keys, the worker's requests come with the key it registered with (the scheduler
  // announces it): another worker's key cannot speak for it.
  if (options_.auth.curve && node->public_key() != env.peer) {
    return Status::PermissionDenied(
        fmt::format("worker {} registered with another key than this connection's", sender));
  }
  return Status();
}

// An aggregator sends sums of its workers' pushes, and pulls in the name of one of them
// (docs/aggregation-tier.md); each worker it speaks for must be a worker of the cluster, and
// the one it reads for a live one.
Status ServerLoop::CheckAggregated(const proto::Header& h) const {
  if (h.type() == proto::PULL && h.contributions_size() == 1) {
    const int32_t w = h.contributions(0).worker();
    const proto::NodeInfo* node = link_->view().Node(w);
    if (node == nullptr || node->role() != proto::WORKER || dead_.contains(w)) {
      return Status::InvalidArgument(
          fmt::format("aggregator {} pulls for node {}, which is no live worker of this cluster",
                      h.sender(), w));
    }
    return Status();
  }
  // A switch's chunk sums of one push: the first names its pushes, the rest follow it.
  const bool later_chunk = h.type() == proto::PUSH && h.has_chunk() && h.chunk().index() > 0;
  if (h.type() != proto::PUSH || (h.contributions().empty() && !later_chunk)) {
    return Status::InvalidArgument(fmt::format(
        "aggregator {} may send only sums of pushes and pulls for one worker, not a {} with {} "
        "contribution(s)",
        h.sender(), proto::MsgType_Name(h.type()), h.contributions_size()));
  }
  if (!gate_->summed_pushes()) {
    return Status::FailedPrecondition(fmt::format(
        "consistency '{}' with aggregator '{}' takes each worker's push on its own, not sums "
        "(docs/aggregation-tier.md); push directly",
        gate_->consistency(), gate_->aggregator_spec().Full()));
  }
  for (const proto::Contribution& c : h.contributions()) {
    const proto::NodeInfo* w = link_->view().Node(c.worker());
    if (w == nullptr || w->role() != proto::WORKER || c.seq() <= 0) {
      return Status::InvalidArgument(
          fmt::format("aggregator {} sent a sum with a contribution of node {} (seq {}), which is "
                      "no worker's numbered push",
                      h.sender(), c.worker(), c.seq()));
    }
  }
  return Status();
}

// Everything a request must pass before the gate sees it.
Status ServerLoop::CheckRequest(const Envelope& env) const {
  const proto::Header& h = env.message.header;
  if (!env.status.ok()) return env.status;
  if (Status s = CheckSender(env); !s.ok()) return s;
  if (standby_) {
    return Status::Unavailable(
        fmt::format("node {} is a backup of server rank {}; it serves no requests until promoted",
                    link_->id(), link_->rank()));
  }
  if (!map_) return Status::Unavailable("no shard map installed yet");
  if (h.type() == proto::CLOCK || h.type() == proto::CLOCK_SYNC) return Status();
  if (h.type() != proto::PUSH && h.type() != proto::PULL && h.type() != proto::INIT) {
    return Status::InvalidArgument(
        fmt::format("a server does not take {} messages", proto::MsgType_Name(h.type())));
  }
  PartitionState* part = state_.store->Find(h.partition());
  if (part != nullptr && part->table() != nullptr) {
    const TensorSpec& table = map_->tensors()[part->info().tensor_id];
    if (Status s = CheckTableRequest(h, env.message, table); !s.ok()) return s;
    return tables_defined_;
  }
  if (part == nullptr) {
    const int32_t id = h.partition();
    return id < 0 || static_cast<size_t>(id) >= map_->partitions().size()
               ? Status::NotFound(fmt::format("no partition {}", id))
               : Status::NotFound(fmt::format("partition {} lives on server rank {}", id,
                                              Placement().partitions()[id].server_rank));
  }
  return Status();
}

// A request that failed its checks. A worker of the cluster always hears why. A peer that is
// none (junk, a stranger, a worker's identity faked on another connection) hears it for its
// first kErrorsToStrangers requests only: a peer that never reads its replies would otherwise
// make the server queue them without bound. Logged for the first 20, then every 1000th.
void ServerLoop::Reject(const Envelope& env, const Status& s) {
  constexpr int kErrorsToStrangers = 64;
  const proto::Header& h = env.message.header;
  ++errors_;
  if (errors_ <= 20 || errors_ % 1000 == 0) {
    spdlog::warn("rejected request from {} ({} rejected so far): {}", h.sender(), errors_,
                 s.ToString());
  }
  bool worker = false;
  for (const proto::NodeInfo& w : link_->view().workers()) {
    worker = worker || (IsNodeIdentity(env.identity, w.id()) && !dead_.contains(w.id()));
  }
  const proto::NodeInfo* node = link_->view().Node(h.sender());
  worker = worker || (node != nullptr && node->role() == proto::AGGREGATOR &&
                      IsNodeIdentity(env.identity, h.sender()) && !dead_.contains(h.sender()));
  if (!worker) {
    if (errors_to_strangers_.size() >= 4096) errors_to_strangers_.clear();  // bounded
    if (++errors_to_strangers_[env.identity] > kErrorsToStrangers) return;
  }
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

void ServerLoop::HandleWorker(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (h.type() == proto::REPLICATE) return OnReplicate(env);
  if (h.type() == proto::MOVE_STATE) return OnMoveState(env);
  if (AnswerMoved(env)) return;
  if (env.status.ok() && h.type() == proto::SHM_ATTACH) return AttachShm(env);
  if (env.status.ok() && h.type() == proto::CMA_ATTACH) return AttachCma(env);
  if (env.status.ok() && h.type() == proto::CMA_REVOKE) return RevokeCma(env);
  if (Status s = CheckRequest(env); !s.ok()) return Reject(env, s);
  if (h.has_chunk()) {  // a switch's chunk sum: served once its push is whole
    PartitionState* part = state_.store->Find(h.partition());
    if (part->table() != nullptr) {
      return Reject(env, Status::InvalidArgument(fmt::format(
                             "partition {} is a table's: a switch streams dense partitions only",
                             h.partition())));
    }
    ChunkAssembly::Outcome out = chunks_.Add(env, part->info().length);
    if (out.replaced) {
      proto::Header given_up = ErrorReply(
          h, Status::Aborted("the switch's next push of this partition replaced it"), link_->id());
      given_up.set_request_id(out.replaced->second);
      Reply(out.replaced->first, std::move(given_up));
    }
    if (!out.error.ok()) return Reject(env, out.error);
    if (!out.whole) return;
    env = std::move(*out.whole);
  }
  if (h.type() == proto::PULL && h.contributions_size() == 1) {
    // An aggregator's pull is the read of the worker it names (CheckAggregated): the gate
    // holds it to that worker's clock; the answer goes to the aggregator's connection.
    env.message.header.set_sender(h.contributions(0).worker());
    env.message.header.clear_contributions();
  }
  if (drain_) {
    drain_->deferred.push_back(std::move(env));  // handing the rank over: unanswered for now
    return;
  }
  if (DeferMoving(env)) return;  // its partition is on its way to another rank
  if (h.type() == proto::CLOCK_SYNC) return gate_->Observe(h);
  if (cut_ && !cut_->job && h.clock() >= cut_->cut.clock()) {
    cut_->deferred.push_back(std::move(env));  // after the checkpoint's clock: waits for it
    return;
  }
  max_clock_seen_ = std::max(max_clock_seen_, h.clock());
  if (h.type() == proto::CLOCK) return gate_->OnClock(env);
  if (h.shm_length() != 0) {
    if (Status s = BorrowShm(env); !s.ok()) return Reject(env, s);
  }
  if (h.cma_length() != 0) {
    if (h.cma_length() < 0 || h.shm_length() != 0 || !env.message.payload.empty() ||
        !cma_.Attached(h.sender())) {
      return Reject(env, Status::Malformed(fmt::format(
                             "a cross memory request of {} bytes (with {} frame(s), shm {}) from "
                             "worker {}, which {} attached",
                             h.cma_length(), env.message.payload.size(), h.shm_length(), h.sender(),
                             cma_.Attached(h.sender()) ? "is" : "is not")));
    }
  }
  (h.type() == proto::PULL ? pulls_ : pushes_)++;
  gate_->Admit(env);
}

void ServerLoop::HandleBatch(Envelope& env) {
  std::vector<Envelope> parts;
  if (Status s = Unbatch(env, parts); !s.ok()) return Reject(env, s);
  answers_.emplace(Answers{env.identity, Batch(kAnswerBatchBytes)});
  for (Envelope& part : parts) HandleWorker(part);
  SendAnswers();
  answers_.reset();
}

void ServerLoop::Answer(const std::string& identity, proto::Header&& header,
                        std::vector<zmq::message_t>&& payload) {
  if (answers_ && identity == answers_->identity) {
    int64_t bytes = 0;
    for (const zmq::message_t& m : payload) bytes += static_cast<int64_t>(m.size());
    if (bytes < kAnswerBatchBytes) {
      if (!answers_->batch.Fits(bytes)) SendAnswers();
      answers_->batch.Add(std::move(header), std::move(payload));
      return;
    }
    SendAnswers();  // in order: what was collected goes first
  }
  SendRouted(*router_, identity, header, std::move(payload));
}

void ServerLoop::SendAnswers() {
  if (!answers_) return;
  answers_->batch.Flush(link_->id(), [&](const proto::Header& h, std::vector<zmq::message_t> p) {
    SendRouted(*router_, answers_->identity, h, std::move(p));
  });
}

void ServerLoop::Serve(DataRequest&& request) {
  const int owner = Owner(map_->partitions()[request.message.header.partition()]);
  const int32_t late = moved_in_.empty() ? -1 : LateFor(request);
  if (owner > 0) {
    apply_threads_->Hand(owner - 1, std::move(request));
  } else {
    // Small partitions belong to this thread: a hand-over would cost more than the work.
    ServeData(state_, request, scratch_, [&](DataReply&& r) {
      Answer(request.identity, std::move(r.header), std::move(r.payload));
    });
    FaultPoint("update.replied");
  }
  if (late >= 0) LateRound(late, owner);  // after the update (FIFO per owner)
}

// Every owner applies the round; FIFO hand-over puts this after every push that arrived
// before it and before every read released after it.
void ServerLoop::ApplyRound(const RoundSpec& round) {
  if (!map_) return;
  apply_threads_->Broadcast(round);
  CompleteRound(state_, 0, round);
}

}  // namespace hetps
