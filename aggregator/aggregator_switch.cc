// AggregatorLoop in switch emulation (aggregator/switch_sum.h, docs/aggregation-tier.md): the
// workers' chunks summed in slots, each chunk's sum sent to the partition's server as soon as
// the last member's chunk arrived, the members told so they send the next.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "aggregator/aggregator_loop.h"
#include "common/logging.h"

namespace hetps {

void AggregatorLoop::OnChunk(Envelope& env) {
  if (Status s = CheckRequest(env); !s.ok()) return Refuse(env, s);
  const proto::Header& h = env.message.header;
  if (!switch_) {
    return Refuse(env, Status::FailedPrecondition(
                           "this aggregator sums whole pushes, not chunks (it runs without "
                           "--switch_chunk)"));
  }
  if (env.message.payload.size() != 1 || h.num_elements() < 1 ||
      env.message.payload[0].size() != static_cast<size_t>(h.num_elements()) * 4) {
    return Refuse(env, Status::SizeMismatch(fmt::format(
                           "worker {}'s chunk of partition {} is not one frame of {} words",
                           h.sender(), h.partition(), h.num_elements())));
  }
  const zmq::message_t& frame = env.message.payload[0];
  std::span<const uint32_t> words;
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint32_t) == 0) {
    words = {static_cast<const uint32_t*>(frame.data()), static_cast<size_t>(h.num_elements())};
  } else {
    words_.resize(static_cast<size_t>(h.num_elements()));
    std::memcpy(words_.data(), frame.data(), frame.size());
    words = words_;
  }
  SwitchSum::Added added = switch_->Add(h, env.identity, words, Now());
  if (added.failed) FailStream(*added.failed);
  if (!added.refused.ok()) {
    if (!added.silent) Refuse(env, added.refused);
    return;
  }
  counts_.bytes_in += static_cast<int64_t>(frame.size());
  if (added.sum) SendChunkUp(*added.sum);
}

void AggregatorLoop::SendChunkUp(SwitchSum::ChunkSum& c) {
  proto::Header h;
  if (c.head) h = std::move(*c.head);
  h.set_type(proto::PUSH);
  h.set_sender(link_->id());
  h.set_request_id(c.stream);
  h.set_partition(c.partition);
  h.set_num_elements(static_cast<int64_t>(c.words.size()));
  *h.mutable_chunk() = c.chunk;
  *h.mutable_switch_spec() = switch_->spec();
  if (dead_servers_.contains(c.rank)) {
    switch_->Abandon(c.stream);
    upstream_.erase(c.stream);
    return Answer(c.acks, ErrorReply(h,
                                     Status::Unavailable(fmt::format(
                                         "server rank {} is down; push directly", c.rank)),
                                     link_->id()));
  }
  if (c.chunk.index() == 0) {  // the members' pushes are answered with the server's reply
    upstream_[c.stream] = {c.rank, c.partition, c.acks, /*pull=*/false};
    ++counts_.sums;
  }
  ++counts_.chunks;
  counts_.bytes_up += static_cast<int64_t>(c.words.size_bytes());
  std::vector<zmq::message_t> payload;
  payload.emplace_back(c.words.data(), c.words.size_bytes());
  hetps::Send(servers_[c.rank], h, std::move(payload));
  if (!c.waiters.empty()) {  // the last chunk: the server's reply answers them
    counts_.pushes += static_cast<int64_t>(c.waiters.size());
    return;
  }
  proto::Header ack;
  ack.set_type(proto::PUSH_REPLY);
  ack.set_sender(link_->id());
  ack.set_partition(c.partition);
  *ack.mutable_chunk() = c.chunk;
  for (const SwitchSum::Waiter& w : c.acks) {
    ack.set_request_id(w.request_id);
    SendRouted(*router_, w.identity, ack);
  }
}

void AggregatorLoop::FailStream(const SwitchSum::Failed& f) {
  if (f.waiters.empty()) return;
  if (f.stream != 0) upstream_.erase(f.stream);  // the server drops what it holds of it
  proto::Header error = ErrorReply(proto::Header(), f.why, link_->id());
  error.set_partition(f.partition);
  spdlog::warn("switch: {}", f.why.ToString());
  Answer(f.waiters, error);
}

void AggregatorLoop::FailStreams(std::vector<SwitchSum::Failed> failed) {
  for (const SwitchSum::Failed& f : failed) FailStream(f);
}

}  // namespace hetps
