#include "server/serving.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace hetps {
namespace {

void CountPush(const ServingState& shared, const Partition& p, size_t bytes, int64_t staleness) {
  auto it = shared.layers.find(shared.map->tensors()[p.tensor_id].layer);
  if (it == shared.layers.end()) return;
  ServingState::LayerCounters& c = *it->second;
  c.pushes.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  c.staleness_sum.fetch_add(staleness, std::memory_order_relaxed);
  int64_t seen = c.max_staleness.load(std::memory_order_relaxed);
  while (staleness > seen && !c.max_staleness.compare_exchange_weak(seen, staleness)) {
  }
}

}  // namespace

void CompleteRound(const ServingState& shared, int owner, const RoundSpec& round) {
  const bool flush = round.IsFlush();
  for (int32_t id : shared.owned[owner]) {
    PartitionState* part = shared.store->Find(id);
    part->ApplyRound(*shared.optimizer, round);
    if (flush) part->aggregator()->Flush(*part);
  }
}

namespace {

// Validates a PUSH/INIT payload against its partition.
Status CheckPayload(const proto::Header& h, const Message& m, const Partition& p) {
  if (h.dtype() != proto::FLOAT32) {
    return Status::DtypeMismatch(fmt::format("partition {} holds float32, request says {}", p.id,
                                             proto::DType_Name(h.dtype())));
  }
  if (h.num_elements() != p.length) {
    return Status::SizeMismatch(fmt::format("partition {} holds {} elements, request says {}", p.id,
                                            p.length, h.num_elements()));
  }
  const size_t want = static_cast<size_t>(p.length) * sizeof(float);
  if (!h.codec().empty() && m.payload.size() == 1) return Status();  // the decoder checks sizes
  if (m.payload.size() != 1 || m.payload[0].size() != want) {
    return Status::SizeMismatch(
        fmt::format("partition {} needs one payload frame of {} bytes, got {} frame(s) of {} bytes",
                    p.id, want, m.payload.size(), m.payload.empty() ? 0 : m.payload[0].size()));
  }
  return Status();
}

// Reads a float payload in place when it is aligned (zmq's buffers are), else via a copy.
const float* FloatsOf(const zmq::message_t& frame, std::vector<float>& scratch) {
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) == 0) {
    return static_cast<const float*>(frame.data());
  }
  scratch.resize(frame.size() / sizeof(float));
  std::memcpy(scratch.data(), frame.data(), frame.size());
  return scratch.data();
}

// A pull, answered zero-copy: the reply holds a snapshot of the values until ZeroMQ sent it.
// Pulls may ask for these codecs (deterministic and stateless).
bool PullCodecAllowed(const std::string& codec) { return codec == "none" || codec == "fp16"; }

DataReply ServePull(const ServingState& shared, const proto::Header& h, int64_t min_clock,
                    PartitionState& part) {
  using Snapshot = std::shared_ptr<const std::vector<float>>;
  const Partition& p = part.info();
  Snapshot snapshot = part.Snapshot();
  zmq::message_t values;
  DataReply r;
  if (!h.codec().empty() && h.codec() != "none") {
    auto codec = PullCodecAllowed(h.codec())
                     ? shared.codecs->Get(h.codec())
                     : StatusOr<std::shared_ptr<const compress::Codec>>(Status::InvalidArgument(
                           fmt::format("pulls may use codec none or fp16, not '{}'", h.codec())));
    if (!codec.ok()) return {ErrorReply(h, codec.status(), shared.self), {}};
    std::vector<uint8_t> bytes;
    (*codec)->Encode(snapshot->data(), p.length, {}, nullptr, bytes);
    values = OwnedFrame(std::move(bytes));
    r.header.set_codec(h.codec());
  } else {
    auto* held = new Snapshot(std::move(snapshot));  // released when ZeroMQ has sent it
    values = zmq::message_t(
        const_cast<float*>((*held)->data()), static_cast<size_t>(p.length) * sizeof(float),
        [](void*, void* hint) { delete static_cast<Snapshot*>(hint); }, held);
  }
  const std::string codec_name = r.header.codec();
  r.header = ReplyTo(h, proto::PULL_REPLY, shared.self);
  r.header.set_codec(codec_name);
  r.header.set_dtype(proto::FLOAT32);
  r.header.set_num_elements(p.length);
  r.header.set_version(part.version());
  r.header.set_min_clock(min_clock);
  r.payload.push_back(std::move(values));
  part.aggregator()->OnPull(part, h.sender());
  return r;
}

// A push (held for its round, or handed to the aggregator) or an init, after validation.
DataReply ServeUpdate(const ServingState& shared, DataRequest& req, PartitionState& part,
                      const float* data) {
  Message& m = req.message;
  const proto::Header& h = m.header;
  DataReply r;
  if (h.type() == proto::INIT) {
    part.InitializeFrom(data);
    r.header = ReplyTo(h, proto::INIT_REPLY, shared.self);
    r.header.set_version(part.version());
    return r;
  }
  // Staleness of a push: versions applied since the one it was computed from (ALGORITHMS.md
  // §3), recorded in its reply. A base from the future (a confused client) counts as fresh.
  const int64_t staleness = std::max<int64_t>(0, part.version() - h.version());
  if (req.hold) {
    // Synchronous consistency: applied with the rest of its round (CompleteRound).
    zmq::message_t frame =
        data == m.payload[0].data()
            ? std::move(m.payload[0])
            : zmq::message_t(data, static_cast<size_t>(part.info().length) * sizeof(float));
    part.Hold(h.clock(), h.sender(), std::move(frame), h.weight(), h.version());
  } else {
    PushInfo info;
    info.worker = h.sender();
    info.clock = h.clock();
    info.base_version = h.version();
    info.weight = h.weight();
    info.layer = h.layer();
    info.window = req.window;
    part.aggregator()->OnPush(part, info, data);
  }
  r.header = ReplyTo(h, proto::PUSH_REPLY, shared.self);
  r.header.set_version(part.version());
  r.header.set_staleness(staleness);
  return r;
}

}  // namespace

DataReply ServeData(const ServingState& shared, DataRequest& req, std::vector<float>& scratch) {
  Message& m = req.message;
  const proto::Header& h = m.header;
  PartitionState* part = shared.store->Find(h.partition());
  if (!part->initialized() && h.type() != proto::INIT) {
    return {ErrorReply(h,
                       Status::FailedPrecondition(fmt::format(
                           "partition {} is not initialized yet (init=worker: a worker must Init "
                           "it first)",
                           part->info().id)),
                       shared.self),
            {}};
  }
  if (h.type() == proto::PULL) return ServePull(shared, h, req.min_clock, *part);
  if (Status s = CheckPayload(h, m, part->info()); !s.ok()) {
    spdlog::warn("rejected {} from node {}: {}", proto::MsgType_Name(h.type()), h.sender(),
                 s.ToString());
    return {ErrorReply(h, s, shared.self), {}};
  }
  const size_t bytes = m.payload[0].size();
  auto counted = [&](DataReply r) {
    if (h.type() == proto::PUSH) CountPush(shared, part->info(), bytes, r.header.staleness());
    return r;
  };
  if (h.codec().empty()) {
    return counted(ServeUpdate(shared, req, *part, FloatsOf(m.payload[0], scratch)));
  }
  // Compressed: validated and decoded before anything reads it.
  const Partition& p = part->info();
  auto codec = shared.codecs->Get(h.codec());
  Status s = codec.status();
  if (s.ok()) {
    compress::CodecContext ctx;
    ctx.key = {0, h.partition(), h.clock()};
    ctx.cols = compress::RowLength(shared.map->tensors()[p.tensor_id].shape, p.offset, p.length);
    scratch.resize(p.length);
    s = (*codec)->Decode(static_cast<const uint8_t*>(m.payload[0].data()), m.payload[0].size(),
                         p.length, ctx, scratch.data());
  }
  if (!s.ok()) {
    spdlog::warn("rejected {} from node {}: codec {}: {}", proto::MsgType_Name(h.type()),
                 h.sender(), h.codec(), s.ToString());
    return {ErrorReply(h, s, shared.self), {}};
  }
  return counted(ServeUpdate(shared, req, *part, scratch.data()));
}

}  // namespace hetps
