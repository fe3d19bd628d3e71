// SchedulerLoop: live policy switches, straggler figures and hints (scheduler_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "scheduler/scheduler_loop.h"

namespace hetps {

// Under --dp a client's update must go up whole each round: a layer held back and sent later
// with the next rounds' deltas added would carry more than the clip bound.
Status SchedulerLoop::PrivateLayers(const std::string& layer_schedule) const {
  if (fed_.privacy().spec().on() && layer_schedule.substr(0, layer_schedule.find(':')) != "every") {
    return Status::InvalidArgument(
        "--dp clips each round's whole update: a layer schedule other than every would send "
        "layers later with several rounds' deltas summed, beyond the clip bound");
  }
  return Status();
}

void SchedulerLoop::StartPolicyChange(const Envelope& env) {
  const proto::Header& h = env.message.header;
  if (!h.policy().layer_schedule().empty()) {  // the scheduler's own: no server is asked
    Status s = PrivateLayers(h.policy().layer_schedule());
    if (s.ok()) s = layers_.Set(h.policy().layer_schedule());
    if (!s.ok()) {
      Reply(env.identity, ErrorReply(h, s, kSchedulerId));
      return;
    }
    spdlog::info("operator set the layer schedule to '{}'", layers_.spec());
    Save();
    if (h.policy().consistency().empty()) {
      Reply(env.identity, ReplyTo(h, proto::POLICY_ACK, kSchedulerId));
      return;
    }
  }
  std::set<int32_t> servers;
  for (int32_t id : members_.LiveServers()) servers.insert(id);
  if (!view_sent_ || servers.empty()) {
    Reply(env.identity,
          ErrorReply(h, Status::Unavailable("the cluster has not formed yet"), kSchedulerId));
    return;
  }
  const uint64_t id = next_policy_id_++;
  PolicyChange& change = policy_changes_[id];
  change.requester.request_id = h.request_id();
  change.requester.identity = env.identity;
  change.waiting = servers;
  change.policy = h.policy();
  change.policy.clear_layer_schedule();
  proto::Header out;
  out.set_type(proto::SET_POLICY);
  out.set_sender(kSchedulerId);
  out.set_request_id(id);
  *out.mutable_policy() = change.policy;
  for (int32_t s : servers) Reply(members_.ById(s)->identity, out);
  spdlog::info("operator requested consistency '{}'; asking {} servers", h.policy().consistency(),
               servers.size());
}

void SchedulerLoop::OnPolicyAnswer(const Member& server, const proto::Header& h) {
  auto it = policy_changes_.find(h.request_id());
  if (it == policy_changes_.end()) return;
  it->second.waiting.erase(server.info.id());
  Status s = StatusOf(h);
  if (!s.ok() && it->second.status.ok()) {
    it->second.status =
        Status(s.code(), fmt::format("server {}: {}", server.info.id(), s.message()));
  }
  FinishPolicyChanges();
}

void SchedulerLoop::FinishPolicyChanges() {
  for (auto it = policy_changes_.begin(); it != policy_changes_.end();) {
    if (!it->second.waiting.empty()) {
      ++it;
      continue;
    }
    proto::Header req;
    req.set_request_id(it->second.requester.request_id);
    const Status& s = it->second.status;
    Reply(it->second.requester.identity, s.ok() ? ReplyTo(req, proto::POLICY_ACK, kSchedulerId)
                                                : ErrorReply(req, s, kSchedulerId));
    spdlog::info("policy change {}", s.ok() ? "applied on every live server" : s.ToString());
    if (s.ok()) {
      const bool scheduler_rounds = policy_ && policy_->scheduler_rounds();  // no switch changes it
      policy_ = it->second.policy;
      policy_->set_scheduler_rounds(scheduler_rounds);
      Save();
    }
    it = policy_changes_.erase(it);
  }
}

// The figures ClusterStats takes from the loop rather than from reports: the federated rounds'
// summary and what the scheduler refused.
void SchedulerLoop::SetFigures() {
  stats_.SetFederated(fed_.SummaryJson());
  stats_.SetPrivacy(fed_.privacy().epsilon(), fed_.privacy().spec().delta);
  stats_.SetVirtual(VirtualJson());
  stats_.SetRefused({.messages = refused_,
                     .registrations = joins_refused_,
                     .connections = guard_ ? guard_->refused() : 0});
}

void SchedulerLoop::Observe() {
  const double now = Now();
  last_observed_ = now;
  stats_.Update(now);
  layers_.Update(stats_.MaxClock());
  SendHints();
  SetFigures();
  if (http_) http_->Publish(stats_.StatusJson(now), stats_.Metrics(now));
}

// Servers learn the flags and the quorum when they change (semi_async:quorum=auto takes the
// quorum, backup:backups=auto the flags); the operator reads each flag change in the log.
void SchedulerLoop::SendHints() {
  std::vector<int32_t> stragglers = stats_.Stragglers();
  const int64_t quorum = stats_.Quorum();
  if (!view_sent_ || (stragglers == hinted_stragglers_ && quorum == hinted_quorum_)) return;
  std::set<int32_t> changed;  // flagged or cleared since the last hint
  std::ranges::set_symmetric_difference(stragglers, hinted_stragglers_,
                                        std::inserter(changed, changed.end()));
  for (int32_t id : changed) {
    const Member* m = members_.ById(id);
    const StragglerState* w = stats_.Straggler(id);
    if (m == nullptr || w == nullptr || m->state != Member::State::kAlive) continue;  // gone
    if (std::ranges::find(stragglers, id) != stragglers.end()) {
      spdlog::warn(
          "worker rank {} (node {}) is a straggler ({}): iteration {:.1f} ms EWMA, {:.1f} "
          "ms under way, median {:.1f} ms",
          m->info.rank(), id, w->Reason(), w->ewma_ms, w->busy_ms, stats_.StragglerReference(id));
    } else {
      spdlog::info("worker rank {} (node {}) recovered: iteration {:.1f} ms EWMA", m->info.rank(),
                   id, w->ewma_ms);
    }
  }
  proto::Header h;
  h.set_type(proto::POLICY_HINT);
  h.set_sender(kSchedulerId);
  for (int32_t id : stragglers) h.add_stragglers(id);
  h.set_quorum(quorum);
  for (int32_t id : members_.LiveServers()) Reply(members_.ById(id)->identity, h);
  hinted_stragglers_ = std::move(stragglers);
  hinted_quorum_ = quorum;
}

}  // namespace hetps
