// ClientIo's aggregation tier (docs/aggregation-tier.md): dense pushes go to this worker's
// aggregator, which answers each once the server acknowledged the sum that holds it, and under
// a synchronous controller so do pulls, which it answers from one pull of the group's clock.
//
// Order. A server must see this worker's requests in the order they were given: a clock after
// the pushes of its clock, a pull after the push it should read, and each partition's numbered
// pushes in order (a server applies an aggregator's sum only as every worker's next push, and
// takes a push numbered at or below the highest it applied as applied before). So a request to
// a server rank waits here while pushes to that rank are at the aggregator; pushes go on
// through the aggregator (it keeps their order) unless something waits.
//
// Fallback. A push the aggregator answers with an error (a refusal, a dead server, its own
// stop) goes to its server directly, with the same number, once nothing of its rank is left at
// the aggregator, ahead of what waited behind it; and this worker pushes directly from then on.
// When the aggregator dies, everything at it goes so. A sum it sent may still reach the server:
// applied before the direct copies, they are answered `duplicate`; after them, or partly, the
// sum is refused. Either way each push is applied once.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/dial.h"
#include "common/tier.h"
#include "worker/client_io.h"

namespace hetps {

namespace {

// Dense pushes of plain tensors (a table's rows, whose keys a sum cannot merge, go directly)
// where the servers take sums, and their pulls where reads may be shared (the view's policy).
bool ThroughTier(const Outgoing& o, const proto::Policy& policy) {
  const proto::MsgType type = o.header.type();
  return ((type == proto::PUSH && policy.summed_pushes()) ||
          (type == proto::PULL && policy.shared_reads())) &&
         !o.frames_only && o.header.num_keys() == 0;
}

}  // namespace

Status ClientIo::ConnectTier() {
  const int servers = static_cast<int>(servers_.size());
  tier_pending_.assign(static_cast<size_t>(servers), 0);
  tier_held_.resize(static_cast<size_t>(servers));
  tier_failed_.resize(static_cast<size_t>(servers));
  const proto::Policy& policy = link_.view().proto().policy();
  // Not over an emulated link (it times the sockets itself), nor in virtual time (a server's
  // answers there say when in the scenario they were given, which a shared one would not).
  if (!options_.tier || delayed_ || options_.virtual_clock ||
      (!policy.summed_pushes() && !policy.shared_reads())) {
    return Status();
  }
  const int32_t node = AggregatorOf(link_.view(), link_.id());
  const proto::NodeInfo* aggregator = link_.view().Node(node);
  if (aggregator == nullptr) return Status();
  auto sock = Dial(ctx_, link_.id(), aggregator->address(), auth_, aggregator->public_key());
  if (!sock.ok()) {
    return Status(sock.status().code(),
                  fmt::format("aggregator {}: {}", node, sock.status().message()));
  }
  tier_ = servers;
  tier_node_ = node;
  servers_.push_back(std::move(*sock));
  ++sockets_changed_;
  dirty_.push_back(1);
  batches_.emplace_back(0);
  in_flight_.push_back(0);
  waiting_.emplace_back();
  transports_.resize(servers_.size());
  spdlog::info("pushing through aggregator {} at {}", node, aggregator->address());
  UseSwitch(*aggregator);
  return Status();
}

bool ClientIo::TierHolds(Outgoing& o) {
  const int rank = o.target;
  if (rank < 0 || rank >= static_cast<int>(tier_pending_.size())) return false;
  if (!tier_held_[rank].empty()) {
    tier_held_[rank].push_back(std::move(o));
    return true;
  }
  if (tier_ >= 0 && ThroughTier(o, link_.view().proto().policy())) {
    o.header.set_rank(rank);
    o.target = tier_;
    return false;
  }
  if (tier_pending_[rank] == 0) return false;
  tier_held_[rank].push_back(std::move(o));
  return true;
}

void ClientIo::OnTierAnswer(Pending& p, const Status& s) {
  const int rank = p.tier_rank;
  if (!s.ok()) {
    if (tier_ >= 0) {
      spdlog::warn(
          "aggregator {} did not serve a {} ({}); going to the servers directly from now on",
          tier_node_, proto::MsgType_Name(p.type), s.ToString());
      tier_ = -1;  // its socket stays heard: it still answers what it holds
    }
    TierFailed(p);
  }
  if (--tier_pending_[rank] == 0) ReleaseTier(rank);
}

void ClientIo::TierFailed(Pending& p) {
  Outgoing o = Reissue(p);
  o.target = p.tier_rank;
  o.header.clear_rank();
  tier_failed_[p.tier_rank].emplace_back(o.header.request_id(), std::move(o));
}

void ClientIo::ReleaseTier(int rank) {
  std::vector<std::pair<uint64_t, Outgoing>> failed = std::move(tier_failed_[rank]);
  tier_failed_[rank].clear();
  std::sort(failed.begin(), failed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });  // as first sent
  std::deque<Outgoing> held = std::move(tier_held_[rank]);
  tier_held_[rank].clear();
  for (auto& [id, o] : failed) Dispatch(o);
  for (Outgoing& o : held) Dispatch(o);
}

void ClientIo::TierDown(const std::string& why) {
  const int index = tier_ >= 0 ? tier_ : static_cast<int>(tier_pending_.size());
  if (index >= static_cast<int>(servers_.size()) || dead_servers_.contains(index)) return;
  spdlog::warn("aggregator {} {}: pushing directly", tier_node_, why);
  tier_ = -1;
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) {
    if (p.target == index) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    Pending& p = pending_[id];
    TierFailed(p);
    --tier_pending_[p.tier_rank];
    pending_.erase(id);
  }
  in_flight_[index] = 0;
  DropStreams();
  dead_servers_.insert(index);
  DropBatch(index);
  servers_[index].close();
  ++sockets_changed_;
  for (int rank = 0; rank < static_cast<int>(tier_pending_.size()); ++rank) {
    if (tier_pending_[rank] == 0) ReleaseTier(rank);
  }
}

}  // namespace hetps
