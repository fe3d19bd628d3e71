// ServerLoop: replication (--replicas; server_loop.h, docs/replication.md). A primary ships
// every log record to its rank's backups (server/replicator.h); a backup applies them on the
// partitions' owning threads in the order they come and serves no worker until the scheduler
// promotes it, after its primary died.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "server/server_loop.h"

namespace hetps {
namespace {

// Applies one shipment (a record, or with replica.snapshot the partition's whole state) to
// `part`. Every size is checked before anything is read.
Status ApplyShipment(const ServingState& state, PartitionState& part, const Message& m) {
  const proto::Header& h = m.header;
  if (m.payload.empty() || m.payload.size() > 2) {
    return Status::Malformed(fmt::format("a shipment of {} frames", m.payload.size()));
  }
  const zmq::message_t& body = m.payload[0];
  if (h.replica().snapshot()) {
    proto::PartitionCheckpoint checkpoint;
    if (m.payload.size() != 1 ||
        !checkpoint.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return Status::Malformed(
          fmt::format("an unreadable snapshot of partition {}", h.partition()));
    }
    return part.Load(checkpoint);
  }
  proto::LogRecord record;
  if (!record.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::Malformed(fmt::format("an unreadable record of partition {}", h.partition()));
  }
  if (m.payload.size() == 1) return ApplyReplicated(state, part, record, nullptr, 0);
  const zmq::message_t& values = m.payload[1];
  if (values.size() % sizeof(float) != 0) {
    return Status::Malformed(fmt::format("a record of {} bytes of floats", values.size()));
  }
  const auto n = static_cast<int64_t>(values.size() / sizeof(float));
  if (reinterpret_cast<uintptr_t>(values.data()) % alignof(float) == 0) {
    return ApplyReplicated(state, part, record, static_cast<const float*>(values.data()), n);
  }
  std::vector<float> copy(static_cast<size_t>(n));
  std::memcpy(copy.data(), values.data(), values.size());
  return ApplyReplicated(state, part, record, copy.data(), n);
}

}  // namespace

void ServerLoop::OnBackups(const proto::Header& h) {
  const proto::Replica& r = h.replica();
  if (standby_) {
    if (r.epoch() != epoch_ || r.primary() != primary_) {
      spdlog::info("following primary node {} of rank {} (epoch {}); waiting for its snapshots",
                   r.primary(), link_->rank(), r.epoch());
      snapshots_ = 0;  // the new primary sends every partition's state again
      synced_reported_ = false;
    }
    primary_ = r.primary();
    epoch_ = r.epoch();
    // The scheduler names this backup to the primary only once it follows it: the primary's
    // first shipment cannot overtake this backup's word of it.
    ReportReplica();
    return;
  }
  epoch_ = r.epoch();
  std::vector<proto::NodeInfo> backups(r.backups().begin(), r.backups().end());
  std::vector<int32_t> fresh = replicator_->SetBackups(backups, r.epoch());
  spdlog::info("rank {} has {} backup(s) at epoch {}", link_->rank(), backups.size(), r.epoch());
  if (fresh.empty()) return;
  if (!map_) {
    snapshots_owed_.insert(snapshots_owed_.end(), fresh.begin(), fresh.end());
    return;
  }
  ShipSnapshots(fresh);
}

// Every owner ships its partitions' states, in its order: a record it ships later reaches the
// new backups after the state it changes.
void ServerLoop::ShipSnapshots(const std::vector<int32_t>& to) {
  for (size_t k = 1; k < state_.owned.size(); ++k) {
    apply_threads_->Run(static_cast<int>(k) - 1, [this, k, to](zmq::socket_t&) {
      for (int32_t id : state_.owned[k]) replicator_->ShipSnapshot(*state_.store->Find(id), to);
    });
  }
  for (int32_t id : state_.owned[0]) replicator_->ShipSnapshot(*state_.store->Find(id), to);
}

void ServerLoop::OnReplicate(Envelope& env) {
  const proto::Header& h = env.message.header;
  auto refuse = [&](const Status& s) {
    ++errors_;
    if (errors_ <= 20)
      spdlog::warn("refused a shipment from node {}: {}", h.sender(), s.ToString());
    SendRouted(*router_, env.identity, ErrorReply(h, s, link_->id()), {});
  };
  if (!env.status.ok()) return refuse(env.status);
  if (options_.auth.curve && options_.auth.RoleOf(env.peer) != KeyRole::kServer) {
    return refuse(Status::PermissionDenied("records are taken from server keys only"));
  }
  if (!standby_) {
    return refuse(Status::FailedPrecondition(
        fmt::format("node {} serves rank {} as its primary (epoch {}) and takes no records",
                    link_->id(), link_->rank(), epoch_)));
  }
  if (h.sender() != primary_ || h.replica().epoch() != epoch_ ||
      !IsNodeIdentity(env.identity, h.sender())) {
    return refuse(Status::FailedPrecondition(
        fmt::format("this backup follows primary node {} at epoch {}, not node {} at epoch {}",
                    primary_, epoch_, h.sender(), h.replica().epoch())));
  }
  // From the primary it follows: a shipment it cannot take means its copy is no longer the
  // rank's state, so it stops after answering.
  auto fail = [&](const Status& s) {
    broken_ = true;
    refuse(s);
  };
  if (!map_) return fail(Status::Unavailable("no shard map installed yet"));
  PartitionState* part = state_.store->Find(h.partition());
  if (part == nullptr) {
    return fail(Status::NotFound(fmt::format("partition {} is not held here", h.partition())));
  }
  if (env.message.payload.empty() || env.message.payload.size() > 2) {
    return fail(Status::Malformed(
        fmt::format("a shipment of {} payload frames", env.message.payload.size())));
  }
  // Acknowledged once handed to the partition's owner, before it is applied (as a primary
  // answers a push once logged): the owner applies it before anything handed over later, a
  // promotion's first request included. A backup that cannot apply a record stops (it no
  // longer holds the rank's state; its primary stops waiting for it once it is declared dead).
  proto::Header ack = ReplyTo(h, proto::REPLICATE_ACK, link_->id());
  ack.mutable_replica()->set_seq(h.replica().seq());
  const std::string identity = env.identity;
  auto shipment = std::make_shared<Message>(std::move(env.message));
  auto apply = [this, shipment, part] {
    Status s = ApplyShipment(state_, *part, *shipment);
    if (s.ok() && shipment->header.replica().snapshot()) ++snapshots_;
    if (!s.ok()) {
      spdlog::error("partition {}: {}", shipment->header.partition(), s.ToString());
      broken_ = true;
    }
  };
  const int owner = Owner(part->info());
  if (owner == 0) {
    apply();
  } else {
    apply_threads_->Run(owner - 1, [apply](zmq::socket_t&) { apply(); });
  }
  SendRouted(*router_, identity, ack, {});
}

void ServerLoop::MaybeReportSynced() {
  if (broken_.load()) {
    fatal_ = Status::Internal("a shipment from the primary could not be applied (see above)");
    return;
  }
  if (!standby_ || !map_ || synced_reported_ || primary_ < 0) return;
  if (snapshots_.load() < state_.store->num_partitions()) return;
  synced_reported_ = true;
  ReportReplica(/*synced=*/true);
  spdlog::info("holding every partition of rank {} from primary node {} (epoch {})", link_->rank(),
               primary_, epoch_);
}

void ServerLoop::ReportReplica(bool synced) {
  if (!standby_ || primary_ < 0) return;
  proto::Header h;
  h.set_type(proto::BACKUPS);
  h.set_node(link_->id());
  h.mutable_replica()->set_epoch(epoch_);
  h.mutable_replica()->set_primary(primary_);
  link_->Send(h);  // it follows primary_
  if (!synced && !synced_reported_) return;
  h.mutable_replica()->set_synced(true);
  link_->Send(h);
}

// The primary died: this backup serves the rank from here on. Its gate starts over at clock 0
// for the live workers (as a restarted server's does): their clocks arrive with their next
// requests, and rounds held here close once every live worker passed them.
void ServerLoop::OnPromote(const proto::Header& h) {
  if (!standby_) return;
  if (!map_ || snapshots_.load() < state_.store->num_partitions()) {
    spdlog::error("promoted before holding every partition; refusing");
    link_->Send(ErrorReply(h, Status::FailedPrecondition("not synced"), link_->id()));
    return;
  }
  standby_ = false;
  epoch_ = h.replica().epoch();
  link_->view() = ClusterView(h.view());
  std::vector<int32_t> workers;
  for (const proto::NodeInfo& w : link_->view().workers()) workers.push_back(w.id());
  gate_->Start(workers, 0);
  const std::string& policy = h.view().policy().consistency();
  if (!policy.empty() && policy != gate_->consistency()) {
    if (Status s = gate_->Switch(policy); !s.ok()) {
      spdlog::warn("the cluster runs consistency '{}', which this server refuses: {}", policy,
                   s.ToString());
    }
  }
  PolicyChanged();
  spdlog::warn("promoted: serving rank {} as its primary from epoch {} ({} workers)", link_->rank(),
               epoch_, workers.size());
  link_->Send(ReplyTo(h, proto::PROMOTED, link_->id()));
}

}  // namespace hetps
