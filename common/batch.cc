#include "common/batch.h"

#include <fmt/format.h>

namespace hetps {

void Batch::Add(proto::Header&& header, std::vector<zmq::message_t>&& payload) {
  header_.add_batch_frames(static_cast<uint32_t>(payload.size()));
  *header_.add_batch() = std::move(header);  // reuses a cleared element when there is one
  for (zmq::message_t& frame : payload) {
    bytes_ += static_cast<int64_t>(frame.size());
    payload_.push_back(std::move(frame));
  }
}

void Batch::Clear() {
  header_.mutable_batch()->Clear();
  header_.clear_batch_frames();
  payload_.clear();
  bytes_ = 0;
}

Status Unbatch(Envelope& env, std::vector<Envelope>& out) {
  proto::Header& h = env.message.header;
  const int parts = h.batch_size();
  if (parts < 1 || parts > kMaxBatchParts || h.batch_frames_size() != parts) {
    return Status::Malformed(
        fmt::format("a batch of {} parts with {} frame counts (at most {} parts)", parts,
                    h.batch_frames_size(), kMaxBatchParts));
  }
  uint64_t frames = 0;
  for (int i = 0; i < parts; ++i) {
    const proto::MsgType type = h.batch(i).type();
    if (type == proto::MSG_UNKNOWN || type == proto::BATCH || h.batch(i).batch_size() > 0) {
      return Status::Malformed(
          fmt::format("part {} of a batch is {}", i, proto::MsgType_Name(type)));
    }
    frames += h.batch_frames(i);
  }
  if (frames != env.message.payload.size()) {
    return Status::Malformed(fmt::format("a batch names {} payload frames and carries {}", frames,
                                         env.message.payload.size()));
  }
  size_t next = 0;
  out.reserve(out.size() + static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) {
    Envelope& part = out.emplace_back();
    part.identity = env.identity;
    part.peer = env.peer;
    part.message.header = std::move(*h.mutable_batch(i));
    part.message.payload.reserve(h.batch_frames(i));
    for (uint32_t f = 0; f < h.batch_frames(i); ++f) {
      part.message.payload.push_back(std::move(env.message.payload[next++]));
    }
  }
  return Status();
}

}  // namespace hetps
