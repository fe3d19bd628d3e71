// ServerLoop: a planned hand-over of this primary's rank to its backup (hetps ctl
// drain-server; server_loop.h, docs/replication.md). Nothing is lost or doubled: a request
// taken before the drain is logged, shipped and answered once the backups acknowledged it; one
// that arrives during it waits unanswered, and the workers resend it to the promoted backup
// (which applies each numbered update once) or, if the drain is called off, it is served here.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_loop.h"

namespace hetps {

void ServerLoop::OnDrain(const proto::Header& h) {
  if (standby_ || !map_) {
    link_->Send(ErrorReply(h,
                           Status::FailedPrecondition(standby_ ? "a backup has no rank to hand over"
                                                               : "no shard map installed yet"),
                           link_->id()));
    return;
  }
  if (drain_) return;  // a repeat
  drain_.emplace();
  drain_->request = h;
  // Each apply thread counts itself done once it reaches this task: everything handed to it
  // before has been logged and shipped.
  for (int k = 0; k < options_.threads; ++k) {
    apply_threads_->Run(k, [done = drain_->owners_done](zmq::socket_t&) { done->fetch_add(1); });
  }
  spdlog::warn("draining rank {}: taking no requests until the backups hold every update",
               link_->rank());
}

void ServerLoop::MaybeFinishDrain() {
  if (!drain_ || drain_->said) return;
  if (drain_->owners_done->load() < options_.threads || !replicator_->settled()) return;
  drain_->said = true;
  link_->Send(ReplyTo(drain_->request, proto::DRAINED, link_->id()));
  spdlog::warn("rank {}: the backups hold every update; {} request(s) wait for the new primary",
               link_->rank(), drain_->deferred.size());
}

void ServerLoop::OnResume() {
  if (!drain_) return;
  std::deque<Envelope> deferred = std::move(drain_->deferred);
  drain_.reset();
  spdlog::warn("drain of rank {} called off: serving again ({} request(s) waited)", link_->rank(),
               deferred.size());
  ReleaseDeferred(std::move(deferred));
}

bool ServerLoop::Stopping() {
  if (!stop_.load()) return false;
  if (stop_seen_) return std::chrono::steady_clock::now() > stop_by_;
  stop_seen_ = true;
  if (standby_ || !map_ || replicator_->fenced() || drain_) return true;
  // Without backups, another rank may take this one's partitions (an elastic cluster: the
  // scheduler refuses otherwise, and this server stops at once).
  int serving = 0;
  for (int32_t r = 0; r < Placement().num_servers(); ++r) serving += Placement().serving(r);
  const bool hand_over = replicator_->active();
  if (!hand_over && (serving < 2 || link_->view().proto().max_servers() == 0)) return true;
  proto::Header h;
  h.set_type(proto::DRAIN);
  h.set_sender(link_->id());
  h.set_rank(link_->rank());
  link_->Send(h);
  stop_by_ = std::chrono::steady_clock::now() + std::chrono::seconds(hand_over ? 5 : 30);
  spdlog::warn("asked to stop: {} rank {} first",
               hand_over ? "handing to its backup" : "moving the partitions of", link_->rank());
  return false;
}

}  // namespace hetps
