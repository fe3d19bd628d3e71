// SchedulerLoop: the declared tensors and the shard map (scheduler_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "scheduler/scheduler_loop.h"

namespace hetps {
namespace {

bool SameDeclaration(const TensorSpec& a, const TensorSpec& b) {
  return a.shape == b.shape && a.layer == b.layer && a.table == b.table;
}

Status OtherDeclaration(const TensorSpec& t) {
  return Status::InvalidArgument(
      fmt::format("{} '{}' was declared with another {}", t.is_table() ? "table" : "tensor", t.name,
                  t.is_table() ? "dim, layer or options" : "shape or layer"));
}

}  // namespace

void SchedulerLoop::HandleDeclare(const Envelope& env, const Member& m) {
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
    *r.mutable_layer_schedule() = layers_.Hint();
    return Reply(env.identity, r);
  }
  // Check the whole declaration before taking any of it.
  for (const proto::TensorSpec& p : h.tensors()) {
    TensorSpec t = FromProto(p);
    if (t.is_table() && options_.replicas > 0) {
      return Reply(env.identity,
                   ErrorReply(h,
                              Status::FailedPrecondition(fmt::format(
                                  "table '{}': sparse tables are not replicated yet; run "
                                  "without --replicas (docs/replication.md)",
                                  t.name)),
                              kSchedulerId));
    }
    auto it = declared_.find(t.name);
    if (it != declared_.end() && !SameDeclaration(it->second, t)) {
      return Reply(env.identity, ErrorReply(h, OtherDeclaration(t), kSchedulerId));
    }
  }
  for (const proto::TensorSpec& p : h.tensors()) declared_.emplace(p.name(), FromProto(p));
  declare_.Arrive({m.info.id(), h.request_id(), env.identity});
  Progress();
}

Status SchedulerLoop::CheckAgainstMap(const proto::Header& declare) const {
  for (const proto::TensorSpec& p : declare.tensors()) {
    int32_t id = map_->TensorId(p.name());
    TensorSpec t = FromProto(p);
    if (id < 0) {
      return Status::FailedPrecondition(
          fmt::format("tensor '{}' is new, but the shard map was already built", t.name));
    }
    if (!SameDeclaration(map_->tensors()[id], t)) return OtherDeclaration(t);
  }
  return Status();
}

void SchedulerLoop::BuildShardMap(const std::vector<Arrival>& waiting) {
  std::vector<TensorSpec> tensors;
  for (const auto& [name, t] : declared_) tensors.push_back(t);
  // Over every rank so far: servers may have joined past --num_servers (--max_servers).
  auto map = ShardMap::Build(std::move(tensors), members_.num_servers(), options_.partition_bytes);
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
  layers_.SetShape(ToProto(*map_));
  Save();  // before any server installs it
  waiting_for_map_ = waiting;
  std::vector<int64_t> bytes = map_->ServerBytes();
  spdlog::info("shard map: {} tensors, {} partitions over {} servers ({:.1f}..{:.1f} MiB each)",
               map_->tensors().size(), map_->partitions().size(), map_->num_servers(),
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

}  // namespace hetps
