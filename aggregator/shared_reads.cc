#include "aggregator/shared_reads.h"

#include <algorithm>

namespace hetps {

void SharedReads::Acked(int32_t w, int32_t p, uint64_t id) {
  uint64_t& last = acked_[{w, p}];
  last = std::max(last, id);
}

bool SharedReads::Serves(const Read& r, int32_t w, int32_t p, int64_t clock,
                         const std::string& codec) const {
  if (r.clock < clock || r.codec != codec) return false;
  auto it = acked_.find({w, p});
  return it == acked_.end() || r.id > it->second;
}

std::optional<uint64_t> SharedReads::InFlight(int32_t w, int32_t p, int64_t clock,
                                              const std::string& codec) const {
  auto it = in_flight_.find(p);
  if (it == in_flight_.end()) return std::nullopt;
  for (const Read& r : it->second) {
    if (Serves(r, w, p, clock, codec)) return r.id;
  }
  return std::nullopt;
}

SharedReads::Reply* SharedReads::Kept(int32_t w, int32_t p, int64_t clock,
                                      const std::string& codec) {
  auto it = kept_.find(p);
  if (it == kept_.end() || !Serves(it->second.first, w, p, clock, codec)) return nullptr;
  return &it->second.second;
}

void SharedReads::Sent(int32_t p, uint64_t id, int64_t clock, const std::string& codec) {
  in_flight_[p].push_back({id, clock, codec});
}

SharedReads::Reply& SharedReads::Answered(int32_t p, uint64_t id, Reply reply) {
  std::vector<Read>& flying = in_flight_[p];
  auto read = std::find_if(flying.begin(), flying.end(), [&](const Read& r) { return r.id == id; });
  const Read r = read != flying.end() ? *read : Read{id, 0, ""};
  if (read != flying.end()) flying.erase(read);
  if (flying.empty()) in_flight_.erase(p);
  auto kept = kept_.find(p);
  if (kept == kept_.end() || kept->second.first.id < id) {  // the newest is kept
    kept_[p] = {r, std::move(reply)};
    return kept_[p].second;
  }
  scratch_ = std::move(reply);
  return scratch_;
}

void SharedReads::Failed(int32_t p, uint64_t id) {
  auto it = in_flight_.find(p);
  if (it == in_flight_.end()) return;
  std::erase_if(it->second, [&](const Read& r) { return r.id == id; });
  if (it->second.empty()) in_flight_.erase(it);
}

}  // namespace hetps
