#include "server/chunk_assembly.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "common/fixed_point.h"

namespace hetps {

Status ChunkAssembly::Check(const proto::Header& h, const Envelope& env, int64_t length) const {
  const proto::Chunk& c = h.chunk();
  const proto::SwitchSpec& spec = h.switch_spec();
  if (spec.chunk() < 1 || spec.bits() < 0 || spec.bits() > 24 || !(spec.clip() > 0) ||
      !std::isfinite(spec.clip())) {
    return Status::InvalidArgument(
        fmt::format("aggregator {}'s chunk sum of partition {} is in no fixed point (chunk {}, "
                    "bits {}, clip {})",
                    h.sender(), h.partition(), spec.chunk(), spec.bits(), spec.clip()));
  }
  const int64_t words = spec.chunk();
  if (c.elements() != length || c.count() != (length + words - 1) / words || c.index() < 0 ||
      c.index() >= c.count() || c.offset() != c.index() * words ||
      h.num_elements() != std::min(words, length - c.offset()) || env.message.payload.size() != 1 ||
      env.message.payload[0].size() != static_cast<size_t>(h.num_elements()) * 4) {
    return Status::SizeMismatch(fmt::format(
        "aggregator {}'s chunk {} of {} ({} words at {}) does not cut partition {} of {} "
        "elements into chunks of {}",
        h.sender(), c.index(), c.count(), h.num_elements(), c.offset(), h.partition(), length,
        words));
  }
  return Status();
}

ChunkAssembly::Outcome ChunkAssembly::Add(Envelope& env, int64_t length) {
  const proto::Header& h = env.message.header;
  const std::pair<int32_t, int32_t> key{h.sender(), h.partition()};
  Outcome out;
  auto it = open_.find(key);
  if (Status s = Check(h, env, length); !s.ok()) {
    if (it != open_.end() && it->second.request_id == h.request_id()) open_.erase(it);
    out.error = s;
    return out;
  }
  if (h.chunk().index() == 0) {
    if (it != open_.end()) {
      out.replaced.emplace(it->second.identity, it->second.request_id);
      open_.erase(it);
    }
    if (h.contributions().empty()) {
      out.error = Status::InvalidArgument(
          fmt::format("aggregator {}'s first chunk sum of partition {} names no pushes", h.sender(),
                      h.partition()));
      return out;
    }
    Open& o = open_[key];
    o.identity = env.identity;
    o.request_id = h.request_id();
    o.head = h;
    o.values.resize(static_cast<size_t>(length));
    it = open_.find(key);
  } else if (it == open_.end() || it->second.request_id != h.request_id() ||
             it->second.received != h.chunk().index()) {
    out.error = Status::InvalidArgument(fmt::format(
        "aggregator {}'s chunk {} of partition {} (request {}) follows no chunk {} "
        "of it",
        h.sender(), h.chunk().index(), h.partition(), h.request_id(), h.chunk().index() - 1));
    if (it != open_.end() && it->second.request_id == h.request_id()) open_.erase(it);
    return out;
  }
  Open& o = it->second;
  const void* frame = env.message.payload[0].data();
  const uint32_t* words = static_cast<const uint32_t*>(frame);
  std::vector<uint32_t> aligned;  // a frame whose words are not aligned is read through a copy
  if (reinterpret_cast<uintptr_t>(frame) % alignof(uint32_t) != 0) {
    aligned.resize(static_cast<size_t>(h.num_elements()));
    std::memcpy(aligned.data(), frame, aligned.size() * 4);
    words = aligned.data();
  }
  DecodeFixedPoint(words, h.num_elements(),
                   {.clip = h.switch_spec().clip(), .bits = h.switch_spec().bits()},
                   o.values.data() + h.chunk().offset());
  if (++o.received < h.chunk().count()) return out;
  out.whole = Whole(o, env);
  open_.erase(it);
  return out;
}

// The push the chunk sums made: chunk 0's header as a plain sum, the values as its frame.
Envelope ChunkAssembly::Whole(Open& o, const Envelope& last) {
  Envelope whole;
  whole.identity = last.identity;
  whole.peer = last.peer;
  whole.message.header = std::move(o.head);
  proto::Header& w = whole.message.header;
  w.clear_chunk();
  w.clear_switch_spec();
  w.set_dtype(proto::FLOAT32);
  w.set_num_elements(static_cast<int64_t>(o.values.size()));
  auto* values = new std::vector<float>(std::move(o.values));
  whole.message.payload.emplace_back(
      values->data(), values->size() * sizeof(float),
      [](void*, void* hint) { delete static_cast<std::vector<float>*>(hint); }, values);
  return whole;
}

void ChunkAssembly::Forget(int32_t node) {
  std::erase_if(open_, [node](const auto& entry) { return entry.first.first == node; });
}

}  // namespace hetps
