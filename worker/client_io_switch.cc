// ClientIo's pushes to an aggregator in switch emulation (aggregator/switch_sum.h,
// docs/aggregation-tier.md): a raw float32 push streams as chunks of fixed-point words, at
// most `slots` in flight; the switch says when a chunk was summed (its slot is free), which lets
// the next one go (SwitchML's self-clocking), and answers the push itself with the server's
// reply to the whole sum. The push stays one request (its number, its window bytes, its
// fallback): what fails goes to the server directly as for a whole push (client_io_tier.cc).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "common/fixed_point.h"
#include "common/tier.h"
#include "worker/client_io.h"

namespace hetps {

void ClientIo::UseSwitch(const proto::NodeInfo& aggregator) {
  const proto::Policy& policy = link_.view().proto().policy();
  if (aggregator.switch_spec().chunk() < 1 || !policy.synchronous() || !policy.summed_pushes()) {
    return;
  }
  switch_ = aggregator.switch_spec();
  const size_t group = GroupOf(link_.view(), aggregator.id()).size();
  switch_->set_bits(FixedPointBits(static_cast<double>(std::max<size_t>(group, 1))));
  spdlog::info("streaming pushes to the switch in chunks of {} words, {} in flight",
               switch_->chunk(), switch_->slots());
}

bool ClientIo::Streams(const Outgoing& o) const {
  const proto::Header& h = o.header;
  return switch_ && h.type() == proto::PUSH && h.codec().empty() && h.num_elements() > 0 &&
         o.payload.size() == 1 &&
         o.payload[0].size() == static_cast<size_t>(h.num_elements()) * sizeof(float) &&
         h.shm_length() == 0 && h.cma_length() == 0;
}

void ClientIo::StartStream(uint64_t id, Outgoing& o) {
  ChunkStream& st = streams_[id];
  st.frame = std::move(o.payload[0]);
  st.elements = o.header.num_elements();
  st.count = (st.elements + switch_->chunk() - 1) / switch_->chunk();
  st.head = std::move(o.header);
  const int64_t window = std::min<int64_t>(st.count, switch_->slots());
  while (st.next < window) SendChunk(id, st);
}

void ClientIo::SendChunk(uint64_t id, ChunkStream& st) {
  const int64_t index = st.next++;
  const int64_t offset = index * switch_->chunk();
  const int64_t n = std::min<int64_t>(switch_->chunk(), st.elements - offset);
  proto::Header h;
  if (index == 0) {
    h = st.head;  // the push's number, base version, weight, layer, loss
  } else {
    h.set_type(proto::PUSH);
    h.set_sender(st.head.sender());
    h.set_request_id(id);
    h.set_partition(st.head.partition());
    h.set_clock(st.head.clock());
    h.set_rank(st.head.rank());
  }
  h.set_num_elements(n);
  proto::Chunk& c = *h.mutable_chunk();
  c.set_index(index);
  c.set_count(st.count);
  c.set_offset(offset);
  c.set_elements(st.elements);
  *h.mutable_switch_spec() = *switch_;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * sizeof(uint32_t));
  const float* values = static_cast<const float*>(st.frame.data()) + offset;
  std::vector<float> aligned;  // a frame whose floats are not aligned is read through a copy
  if (reinterpret_cast<uintptr_t>(st.frame.data()) % alignof(float) != 0) {
    aligned.resize(static_cast<size_t>(n));
    std::memcpy(aligned.data(), static_cast<const char*>(st.frame.data()) + offset * 4, n * 4);
    values = aligned.data();
  }
  EncodeFixedPoint(values, n, 1.0, {.clip = switch_->clip(), .bits = switch_->bits()},
                   reinterpret_cast<uint32_t*>(bytes.data()));
  std::vector<zmq::message_t> payload;
  payload.push_back(OwnedFrame(std::move(bytes)));
  // The aggregator's socket, which stays heard after this worker went direct for new pushes
  // (client_io_tier.cc): the pushes already streaming there finish there.
  SendToServer(TierSocket(), std::move(h), std::move(payload));
}

void ClientIo::OnChunkSummed(const proto::Header& h, int from) {
  auto it = streams_.find(h.request_id());
  if (it == streams_.end() || from != TierSocket()) return;  // a stream that ended meanwhile
  ChunkStream& st = it->second;
  if (h.chunk().index() != st.acked) {  // chunks complete in order: anything else is bogus
    spdlog::warn("the switch said chunk {} of request {} was summed; chunk {} was due",
                 h.chunk().index(), h.request_id(), st.acked);
    return;
  }
  ++st.acked;
  if (st.next < st.count) SendChunk(it->first, st);
}

void ClientIo::DropStreams() {
  std::erase_if(streams_, [this](const auto& s) { return !pending_.contains(s.first); });
}

}  // namespace hetps
