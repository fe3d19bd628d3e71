#include "aggregator/switch_sum.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/fixed_point.h"

namespace hetps {

StatusOr<SwitchSum> SwitchSum::Make(Options options, uint64_t first_stream) {
  const proto::SwitchSpec& spec = options.spec;
  if (spec.chunk() < 1 || spec.slots() < 1 || !(spec.clip() > 0) || options.group.size() > 64) {
    return Status::InvalidArgument(fmt::format(
        "switch emulation needs chunk >= 1 word, slots >= 1, clip > 0 and a group of at most 64 "
        "workers (got {}, {}, {}, {})",
        spec.chunk(), spec.slots(), spec.clip(), options.group.size()));
  }
  options.spec.set_bits(FixedPointBits(std::max<double>(1, options.group.size())));
  SwitchSum s(std::move(options));
  s.next_stream_ = first_stream;
  for (int32_t w : s.options_.group) s.live_.insert(w);
  int i = 0;
  for (int32_t w : s.live_) s.member_[w] = i++;
  return s;
}

size_t SwitchSum::slot_bytes() const {
  size_t n = 0;
  for (const auto& [partition, pool] : pools_) n += pool.bytes();
  return n;
}

// The chunk must be where its index says, of the stream's shape, in the group's fixed point.
Status SwitchSum::CheckShape(const proto::Header& h, const Stream* s) const {
  const proto::Chunk& c = h.chunk();
  const int64_t words = options_.spec.chunk();
  if (h.switch_spec().chunk() != options_.spec.chunk() ||
      h.switch_spec().bits() != options_.spec.bits() ||
      h.switch_spec().clip() != options_.spec.clip()) {
    return Status::InvalidArgument(fmt::format(
        "worker {} streams chunks of {} words at {} bits (clip {}); this switch sums {} at {} "
        "(clip {})",
        h.sender(), h.switch_spec().chunk(), h.switch_spec().bits(), h.switch_spec().clip(), words,
        options_.spec.bits(), options_.spec.clip()));
  }
  if (c.elements() < 1 || c.elements() > options_.max_elements ||
      c.count() != (c.elements() + words - 1) / words || c.index() < 0 || c.index() >= c.count() ||
      c.offset() != c.index() * words ||
      h.num_elements() != std::min(words, c.elements() - c.offset())) {
    return Status::SizeMismatch(fmt::format(
        "worker {}'s chunk {} of {} (offset {}, {} words) of partition {} does not cut {} "
        "elements (at most {}) into chunks of {}",
        h.sender(), c.index(), c.count(), c.offset(), h.num_elements(), h.partition(), c.elements(),
        options_.max_elements, words));
  }
  if (s != nullptr && (s->shape.elements() != c.elements() || s->rank != h.rank())) {
    return Status::InvalidArgument(fmt::format(
        "worker {} streams partition {} (clock {}) as {} elements to rank {}; the group as {} to "
        "rank {}",
        h.sender(), h.partition(), h.clock(), c.elements(), h.rank(), s->shape.elements(),
        s->rank));
  }
  return Status();
}

void SwitchSum::DropIdlePools() {
  for (auto it = pools_.begin(); it != pools_.end();) {
    auto open = streams_.lower_bound({it->first, INT64_MIN});
    it =
        open != streams_.end() && open->first.first == it->first ? std::next(it) : pools_.erase(it);
  }
}

// The chunk fits its stream (CheckShape), comes after its worker's chunk 0, and a chunk 0 is
// the worker's first push of the partition at this clock.
Status SwitchSum::CheckOrder(const proto::Header& h, const Stream* s, int member) const {
  if (Status bad = CheckShape(h, s); !bad.ok()) return bad;
  const int64_t index = h.chunk().index();
  if (index == 0 && s != nullptr && s->members[member]) {
    return Status::FailedPrecondition(fmt::format(
        "worker {} pushed partition {} twice at clock {}: a switch sums one push of each worker "
        "per clock",
        h.sender(), h.partition(), h.clock()));
  }
  if (index > 0 && (s == nullptr || !s->members[member])) {
    return Status::InvalidArgument(
        fmt::format("worker {} sent chunk {} of partition {} before its chunk 0", h.sender(), index,
                    h.partition()));
  }
  return Status();
}

// The stream of `key` (opened by its first chunk), with the worker's push in it at its chunk 0.
SwitchSum::Stream& SwitchSum::Join(const Key& key, Stream* s, const proto::Header& h,
                                   const std::string& identity, int member, double now) {
  if (s == nullptr) {
    s = &streams_[key];  // numbered once its first chunk is summed
    s->rank = h.rank();
    s->shape = h.chunk();
    s->members.resize(live_.size());
    s->head.set_partition(key.first);
    s->head.set_clock(key.second);
    s->head.set_version(h.version());
    s->head.set_layer(h.layer());
    s->touched = now;
  }
  if (h.chunk().index() != 0) return *s;
  s->members[member] = Waiter{identity, h.request_id(), h.sender(), h.clock()};
  proto::Contribution& c = *s->head.add_contributions();
  c.set_worker(h.sender());
  c.set_incarnation(h.incarnation());
  c.set_seq(h.seq());
  c.set_weight(h.weight());
  s->head.set_weight(s->head.weight() + h.weight());
  s->head.set_version(std::min(s->head.version(), h.version()));
  if (h.has_loss()) {
    s->losses += h.loss();
    ++s->reported_losses;
  }
  return *s;
}

// The partition's pool: no more slots or words than the partition has.
StatusOr<SlotPool*> SwitchSum::PoolFor(int32_t partition, const Stream& s) {
  auto pool = pools_.find(partition);
  if (pool != pools_.end()) return &pool->second;
  auto made =
      SlotPool::Make(static_cast<int>(std::min<int64_t>(options_.spec.slots(), s.shape.count())),
                     static_cast<int>(std::min<int64_t>(options_.spec.chunk(), s.shape.elements())),
                     static_cast<int>(live_.size()));
  if (!made.ok()) return made.status();
  pool = pools_.emplace(partition, std::move(*made)).first;
  peak_bytes_ = std::max(peak_bytes_, slot_bytes());
  return &pool->second;
}

SwitchSum::Added SwitchSum::Add(const proto::Header& h, const std::string& identity,
                                std::span<const uint32_t> words, double now) {
  DropIdlePools();  // the pools nothing streams into any more
  const Key key{h.partition(), h.clock()};
  Added out;
  if (auto f = failed_.find(key); f != failed_.end()) {
    out.silent = !f->second.insert(h.sender()).second;
    out.refused = Status::Aborted(
        fmt::format("the switch gave up summing partition {} at clock {}; push directly", key.first,
                    key.second));
    return out;
  }
  auto member = member_.find(h.sender());
  if (member == member_.end()) {
    out.refused = Status::Unregistered(
        fmt::format("node {} is no live worker of this switch's group", h.sender()));
    return out;
  }
  auto it = streams_.find(key);
  Stream* open = it == streams_.end() ? nullptr : &it->second;
  if (Status bad = CheckOrder(h, open, member->second); !bad.ok()) {
    out.refused = bad;
    if (open != nullptr) out.failed = Fail(key, bad);
    return out;
  }
  Stream& s = Join(key, open, h, identity, member->second, now);
  const int64_t index = h.chunk().index();
  auto pool = PoolFor(key.first, s);
  auto r = pool.ok() ? (*pool)->Add({key.first, key.second, index}, member->second, words)
                     : StatusOr<SlotPool::Result>(pool.status());
  if (!r.ok() || r->outcome == SlotPool::Outcome::kFull) {
    out.refused =
        r.ok() ? Status::Unavailable(fmt::format(
                     "the slot of chunk {} of partition {} holds another chunk", index, key.first))
               : r.status();
    out.failed = Fail(key, out.refused);
    return out;
  }
  if (r->outcome == SlotPool::Outcome::kComplete) out.sum = Complete(key, s, index, r->sum, now);
  return out;
}

SwitchSum::ChunkSum SwitchSum::Complete(const Key& key, Stream& s, int64_t index,
                                        std::span<const uint32_t> sum, double now) {
  if (index == 0) s.id = options_.next_id ? options_.next_id() : next_stream_++;
  ChunkSum c;
  c.stream = s.id;
  c.partition = key.first;
  c.rank = s.rank;
  c.chunk = s.shape;
  c.chunk.set_index(index);
  c.chunk.set_offset(index * options_.spec.chunk());
  c.words = sum;
  for (const std::optional<Waiter>& w : s.members) c.acks.push_back(*w);
  if (index == 0) {
    c.head = s.head;
    if (s.reported_losses > 0) c.head->set_loss(s.losses / s.reported_losses);
  }
  ++s.summed;
  ++chunks_;
  s.touched = now;
  if (s.summed == s.shape.count()) {
    c.waiters = c.acks;
    streams_.erase(key);  // its pool goes at the next Add, once `sum` was used
  }
  return c;
}

SwitchSum::Failed SwitchSum::Fail(Key key, Status why) {
  Failed f;
  f.partition = key.first;
  f.why = std::move(why);
  std::set<int32_t>& told = failed_[key];
  auto it = streams_.find(key);
  if (it != streams_.end()) {
    f.stream = it->second.id;
    for (const std::optional<Waiter>& w : it->second.members) {
      if (!w) continue;
      f.waiters.push_back(*w);
      told.insert(w->worker);
    }
    streams_.erase(it);
  }
  if (auto pool = pools_.find(key.first); pool != pools_.end())
    pool->second.Drop(key.first, key.second);
  while (failed_.size() > 4096) failed_.erase(failed_.begin());  // the oldest partitions' first
  return f;
}

std::vector<SwitchSum::Failed> SwitchSum::Due(double now) {
  std::vector<Key> late;
  for (const auto& [key, s] : streams_) {
    if (now - s.touched > options_.wait_s) late.push_back(key);
  }
  std::vector<Failed> out;
  for (const Key& key : late) {
    const Stream& s = streams_.at(key);
    std::vector<int32_t> missing;
    for (const auto& [worker, i] : member_) {
      if (!s.members[i]) missing.push_back(worker);
    }
    out.push_back(Fail(key, Status::DeadlineExceeded(fmt::format(
                                "partition {} at clock {}: chunk {} was not summed within {} ms "
                                "(workers without a push of it: {}); push directly",
                                key.first, key.second, s.summed, options_.wait_s * 1000,
                                fmt::join(missing, ", ")))));
  }
  return out;
}

void SwitchSum::Abandon(uint64_t stream) {
  if (stream == 0) return;  // not numbered: nothing of it went upstream
  for (const auto& [key, s] : streams_) {
    if (s.id == stream) return (void)Fail(key, Status());
  }
}

std::vector<SwitchSum::Failed> SwitchSum::TakeAll(const Status& why) {
  std::vector<Key> keys;
  for (const auto& [key, s] : streams_) keys.push_back(key);
  std::vector<Failed> out;
  for (const Key& key : keys) out.push_back(Fail(key, why));
  return out;
}

std::vector<SwitchSum::Failed> SwitchSum::Forget(int32_t worker) {
  if (live_.erase(worker) == 0) return {};
  std::vector<Failed> out = TakeAll(Status::Unavailable(fmt::format(
      "worker {} of the group died while its partitions streamed; push directly", worker)));
  member_.clear();
  int i = 0;
  for (int32_t w : live_) member_[w] = i++;
  pools_.clear();  // sized for the old group
  return out;
}

}  // namespace hetps
