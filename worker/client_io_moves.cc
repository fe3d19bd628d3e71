// ClientIo and live re-sharding (docs/resharding.md): the scheduler broadcasts each new epoch of
// the shard map (SHARD_MAP); from then on every data request goes to the rank the map places its
// partition on. A request that reached a partition's old rank during or after its move is
// answered with the epoch that moved it, and goes again, with its number, to the new rank once
// this client holds that epoch's map (the partition's applied numbers moved with it, so an
// update is applied once whichever rank it reached first).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

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
  if (id >= 0 && static_cast<size_t>(id) < routes_.size()) o.target = routes_[id];
}

void ClientIo::OnShardMap(const proto::ShardMap& update) {
  auto map = ShardMapFromProto(update);
  if (!map.ok() || map->num_servers() != static_cast<int>(tier_pending_.size())) {
    spdlog::warn("ignoring a malformed shard map from the scheduler: {}",
                 map.ok() ? "another number of servers" : map.status().ToString());
    return;
  }
  if (map->epoch() <= map_epoch_) return;
  map_epoch_ = map->epoch();
  routes_.clear();
  for (const Partition& p : map->partitions()) routes_.push_back(p.server_rank);
  spdlog::info("shard map epoch {}: {} partition(s) on other ranks than the rules'", map_epoch_,
               map->moves().size());
  for (auto it = moved_.begin(); it != moved_.end() && it->first <= map_epoch_;) {
    for (Outgoing& o : it->second) Dispatch(o);
    it = moved_.erase(it);
  }
}

void ClientIo::OnMovedReply(Pending& p, int64_t epoch) {
  if (p.via) p.via->Release(p.slot);  // the old rank answered: it holds nothing of the request
  Outgoing o = Reissue(p);
  if (epoch <= map_epoch_) return Dispatch(o);
  moved_[epoch].push_back(std::move(o));  // until the map of that epoch arrives
}

}  // namespace hetps
