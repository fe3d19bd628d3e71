// ClientIo and live re-sharding (docs/resharding.md): the scheduler broadcasts each new epoch of
// the shard map (SHARD_MAP); from then on every data request goes to the rank the map places its
// partition on. A request that reached a partition's old rank during or after its move is
// answered with the epoch that moved it, and goes again, with its number, to the new rank once
// this client holds that epoch's map (the partition's applied numbers moved with it, so an
// update is applied once whichever rank it reached first).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "worker/client_io.h"

namespace hetps {
namespace {

bool IsData(const proto::Header& h) {
  return h.type() == proto::PUSH || h.type() == proto::PULL || h.type() == proto::INIT;
}

}  // namespace

Outgoing ClientIo::Reissue(Pending& p) {
  Outgoing o;
  o.target = p.target;
  o.header = *p.header;
  o.op = p.op;
  o.dst = p.dst;
  o.dst_len = p.dst_len;
  o.src = p.src;
  o.src_bytes = p.src_bytes;
  o.encoded = p.encoded;
  if (p.encoded) {
    o.payload.push_back(SharedFrame(p.encoded));
  } else if (p.src != nullptr) {
    p.op->Expect();  // the caller's buffer is lent once more
    o.payload.emplace_back(const_cast<float*>(p.src), p.src_bytes, ReleaseCallerBuffer,
                           new OpPtr(p.op));
  }
  return o;
}

void ClientIo::Route(Outgoing& o) const {
  if (routes_.empty() || o.target < 0 || o.target == tier_ || !IsData(o.header)) return;
  const int32_t id = o.header.partition();
  if (id >= 0 && static_cast<size_t>(id) < routes_.size() && routes_[id] < ranks()) {
    o.target = routes_[id];
  }
}

// A CLOCK (Client::ClockAsync) goes to every rank that serves; its operation counts each.
void ClientIo::DispatchEveryServer(Outgoing& o) {
  std::vector<int> ranks;
  for (int r = 0; r < this->ranks(); ++r) {
    if (!retired_.contains(r)) ranks.push_back(r);
  }
  if (ranks.empty()) return FailOutgoing(o, Status::Unavailable("no server rank serves"));
  for (size_t i = 1; i < ranks.size(); ++i) o.op->Expect();
  for (int r : ranks) {
    Outgoing each;
    each.target = r;
    each.header = o.header;
    each.op = o.op;
    Dispatch(each);
  }
}

// A server that grew the cluster (--max_servers): one more rank to route to and to clock at.
Status ClientIo::AddRank(const proto::Header& back, const proto::NodeInfo& node) {
  if (tier_ >= 0 || node.rank() != ranks()) {
    return Status::FailedPrecondition(fmt::format("server rank {} added to {} rank(s){}",
                                                  node.rank(), ranks(),
                                                  tier_ >= 0 ? " behind an aggregator" : ""));
  }
  servers_.emplace_back();
  dirty_.push_back(1);
  batches_.emplace_back(options_.batch_bytes);
  in_flight_.push_back(0);
  waiting_.emplace_back();
  transports_.emplace_back();
  tier_pending_.push_back(0);
  tier_held_.emplace_back();
  tier_failed_.emplace_back();
  link_.view() = ClusterView(back.view());
  num_servers_.store(ranks(), std::memory_order_relaxed);
  server_rank_[node.id()] = node.rank();
  if (Status s = Connect(node); !s.ok()) return s;
  spdlog::info("server rank {} added at {}", node.rank(), node.address());
  return Status();
}

void ClientIo::OnShardMap(const proto::ShardMap& update) {
  auto map = ShardMapFromProto(update);
  if (!map.ok() || map->num_servers() < ranks()) {
    spdlog::warn("ignoring a malformed shard map from the scheduler: {}",
                 map.ok() ? "fewer ranks than before" : map.status().ToString());
    return;
  }
  if (map->epoch() <= map_epoch_) return;
  map_epoch_ = map->epoch();
  retired_ = map->retired();
  routes_.clear();
  for (const Partition& p : map->partitions()) routes_.push_back(p.server_rank);
  spdlog::info("shard map epoch {}: {} partition(s) on other ranks than the rules'", map_epoch_,
               map->moves().size());
  for (auto it = moved_.begin(); it != moved_.end() && it->first <= map_epoch_;) {
    for (Outgoing& o : it->second) Dispatch(o);
    it = moved_.erase(it);
  }
}

// The server of a retired rank exited: what it left unanswered goes to the partitions' ranks
// now, and a clock there holds nothing back any more.
void ClientIo::LeaveRetired(int rank) {
  DropBatch(rank);
  servers_[rank].close();
  ++sockets_changed_;
  dead_servers_.insert(rank);
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) {
    if (p.target == rank) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    Pending p = std::move(pending_[id]);
    pending_.erase(id);
    if (p.type == proto::CLOCK || !p.header) {
      p.op->Complete(p.type == proto::CLOCK ? Status()
                                            : Status::Unavailable("its server rank was retired"));
    } else {
      OnMovedReply(p, map_epoch_);
    }
  }
  in_flight_[rank] = 0;
  std::deque<Outgoing> waiting = std::move(waiting_[rank]);
  waiting_[rank].clear();
  for (Outgoing& o : waiting) Dispatch(o);
  spdlog::info("server rank {} retired: {} request(s) went to the other ranks", rank, ids.size());
}

void ClientIo::OnMovedReply(Pending& p, int64_t epoch) {
  if (p.via) p.via->Release(p.slot);  // the old rank answered: it holds nothing of the request
  Outgoing o = Reissue(p);
  if (epoch <= map_epoch_) return Dispatch(o);
  moved_[epoch].push_back(std::move(o));  // until the map of that epoch arrives
}

}  // namespace hetps
