#include "server/serving.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "durable.pb.h"
#include "server/cma_peers.h"
#include "server/fault_point.h"
#include "server/replicator.h"
#include "server/table/table_serving.h"

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

namespace {

proto::Round RoundToProto(const RoundSpec& round) {
  proto::Round r;
  r.set_clock(round.clock);
  for (int32_t w : round.workers) r.add_workers(w);
  r.set_only_clock(round.only_clock);
  r.set_one_step(round.one_step);
  r.set_combine(static_cast<int32_t>(round.combine));
  r.set_staleness_exponent(round.staleness_exponent);
  r.set_flush(round.IsFlush());
  r.set_per_push(round.per_push);
  for (const RoundSpec::Late& l : round.late) {
    proto::LateUpload* late = r.add_late();
    late->set_worker(l.worker);
    late->set_round(l.clock);
    late->set_factor(l.factor);
  }
  if (round.keep_from != std::numeric_limits<int64_t>::max()) r.set_keep_from(round.keep_from);
  if (round.secure) *r.mutable_secure() = *round.secure;
  if (round.noise_std >= 0) r.set_noise_std(round.noise_std);
  return r;
}

RoundSpec RoundFromProto(const proto::Round& r) {
  RoundSpec round = r.flush() ? RoundSpec::Flush() : RoundSpec();
  round.clock = r.clock();
  round.workers.assign(r.workers().begin(), r.workers().end());
  round.only_clock = r.only_clock();
  round.one_step = r.one_step();
  round.combine = static_cast<RoundSpec::Combine>(r.combine());
  round.staleness_exponent = r.staleness_exponent();
  round.per_push = r.per_push();
  for (const proto::LateUpload& l : r.late())
    round.late.push_back({l.worker(), l.round(), l.factor()});
  if (r.has_keep_from()) round.keep_from = r.keep_from();
  if (r.has_secure()) round.secure = std::make_shared<proto::SecureClose>(r.secure());
  if (r.has_noise_std()) round.noise_std = r.noise_std();
  return round;
}

// Applies one update to `part`; serving and the replay after a restart both come here, so a
// replayed log rebuilds exactly what was served. `frame`, when given, holds `data` and may be
// moved into a held update instead of copied.
void ApplyRecord(const ServingState& shared, PartitionState& part, const proto::LogRecord& r,
                 const float* data, zmq::message_t* frame) {
  switch (r.kind()) {
    case proto::LogRecord::PUSH:
      if (r.hold()) {
        const size_t bytes = static_cast<size_t>(part.info().length) * sizeof(float);
        zmq::message_t update = frame != nullptr && frame->data() == data
                                    ? std::move(*frame)
                                    : zmq::message_t(data, bytes);
        part.Hold(r.clock(), r.worker(), std::move(update), r.weight(), r.base_version());
      } else {
        PushInfo info;
        info.worker = r.worker();
        info.clock = r.clock();
        info.base_version = r.base_version();
        info.weight = r.weight();
        info.layer = r.layer();
        info.window = r.window();
        if (r.has_loss()) info.loss = r.loss();
        part.aggregator()->OnPush(part, info, data);
      }
      break;
    case proto::LogRecord::INIT:
      part.InitializeFrom(data);
      break;
    case proto::LogRecord::PULL:
      part.aggregator()->OnPull(part, r.worker());
      break;
    case proto::LogRecord::ROUND: {
      const RoundSpec round = RoundFromProto(r.round());
      part.ApplyRound(*shared.optimizer, round);
      if (round.IsFlush()) part.aggregator()->Flush(part);
      break;
    }
    default:
      break;
  }
  part.MarkApplied(r.incarnation(), r.seq());
  for (const proto::Contribution& c : r.contributions()) part.MarkApplied(c.incarnation(), c.seq());
}

bool Replicated(const ServingState& shared) {
  return shared.replicator != nullptr && shared.replicator->active();
}

// Logs `r` for `part` when the server is durable (an error means it must not be applied) and,
// with `ship`, hands it to the backups (an update's record goes with its reply instead).
Status Log(const ServingState& shared, const PartitionState& part, const proto::LogRecord& r,
           const float* data = nullptr, bool ship = true) {
  const int64_t n = data != nullptr ? part.info().length : 0;
  if (shared.durable != nullptr) {
    if (Status s = shared.durable->Append(part.info().id, r, data, n); !s.ok()) return s;
  }
  if (ship && Replicated(shared)) shared.replicator->Ship(part.info().id, r, data, n);
  return Status();
}

}  // namespace

// Folds a partition's log into a checkpoint once the log holds enough copies of it (see
// LogBytesBeforeCheckpoint).
void MaybeCheckpointPartition(const ServingState& shared, const PartitionState& part) {
  const int32_t id = part.info().id;
  const int64_t bytes = part.state_bytes();
  if (shared.durable == nullptr ||
      shared.durable->log_bytes(id) < LogBytesBeforeCheckpoint(bytes)) {
    return;
  }
  if (Status s = shared.durable->Checkpoint(id, part); !s.ok()) spdlog::error("{}", s.ToString());
}

// A checkpoint copies the whole state (3 copies of the values under Adam) where an update logs
// one, so the number of copies sets the checkpoints' share of the logging cost (at 4 copies
// they were half of it in the quickstart, at 16 an eighth); the 16 MiB bound keeps the log
// records of large partitions dying in RocksDB's memtable (covered by the checkpoint's range
// deletion) instead of being flushed to disk, and the value log's ring from filling up.
// Recovery replays at most that many updates.
int64_t LogBytesBeforeCheckpoint(int64_t partition_bytes) {
  constexpr int64_t kMinCopies = 4, kMaxCopies = 16, kBound = int64_t{16} << 20;
  return std::max(kMinCopies * partition_bytes, std::min(kMaxCopies * partition_bytes, kBound));
}

namespace {

proto::LogRecord RoundRecord(const RoundSpec& round) {
  proto::LogRecord record;
  record.set_kind(proto::LogRecord::ROUND);
  *record.mutable_round() = RoundToProto(round);
  return record;
}

void ApplyRoundRecord(const ServingState& shared, PartitionState& part,
                      const proto::LogRecord& record) {
  if (Status s = Log(shared, part, record); !s.ok()) {
    // The round is applied all the same (its pushes were acknowledged); only a checkpoint
    // can make it durable now.
    spdlog::error("{}", s.ToString());
  }
  ApplyRecord(shared, part, record, nullptr, nullptr);
}

}  // namespace

void CompleteRound(const ServingState& shared, int owner, const RoundSpec& round) {
  const proto::LogRecord record = RoundRecord(round);  // once for all the owner's partitions
  for (int32_t id : shared.owned[owner]) {
    PartitionState* part = shared.store->Find(id);
    if (part == nullptr) continue;  // moved away (server_moves.cc); leaves this list next
    ApplyRoundRecord(shared, *part, record);
  }
}

void ApplyRoundTo(const ServingState& shared, PartitionState& part, const RoundSpec& round) {
  ApplyRoundRecord(shared, part, RoundRecord(round));
}

void CheckpointOwned(const ServingState& shared, int owner) {
  if (shared.durable == nullptr) return;
  for (int32_t id : shared.owned[owner]) {
    if (!shared.durable->dirty(id) || shared.store->Find(id) == nullptr) continue;
    if (Status s = shared.durable->Checkpoint(id, *shared.store->Find(id)); !s.ok()) {
      spdlog::error("{}", s.ToString());
    }
  }
}

Status ApplyReplicated(const ServingState& shared, PartitionState& part, const proto::LogRecord& r,
                       const float* values, int64_t n) {
  if (part.table() != nullptr && r.kind() == proto::LogRecord::PUSH) {
    return ReplayTablePush(part, r, values, n);
  }
  const bool with_values = r.kind() == proto::LogRecord::PUSH || r.kind() == proto::LogRecord::INIT;
  const int64_t length = part.info().length;
  if (with_values ? n != length : n != 0) {
    return Status::Malformed(fmt::format("{} floats where {} belong", n, with_values ? length : 0));
  }
  ApplyRecord(shared, part, r, with_values ? values : nullptr, nullptr);
  return Status();
}

StatusOr<int64_t> RecoverPartition(const ServingState& shared, PartitionState& part) {
  return shared.durable->Recover(part.info().id, part,
                                 [&](const proto::LogRecord& r, const float* values, int64_t n) {
                                   return ApplyReplicated(shared, part, r, values, n);
                                 });
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

// The values of a pull into `r`: through cross memory attach, into the worker's shared memory
// slot, encoded, or (raw) as a frame that holds `snapshot` until ZeroMQ sent it.
Status PullPayload(const ServingState& shared, Message& m, const Partition& p,
                   std::shared_ptr<const std::vector<float>> snapshot, DataReply& r) {
  using Snapshot = std::shared_ptr<const std::vector<float>>;
  const proto::Header& h = m.header;
  const size_t bytes = static_cast<size_t>(p.length) * sizeof(float);
  const bool coded = !h.codec().empty() && h.codec() != "none";
  if (h.cma_length() != 0) {
    // Cross memory attach: written straight into the caller's array, before the reply says so.
    Status s = coded || h.cma_length() != static_cast<int64_t>(bytes)
                   ? Status::SizeMismatch(fmt::format(
                         "partition {}: a cross memory pull needs a raw array of {} bytes, not {}",
                         p.id, bytes, h.cma_length()))
               : shared.cma == nullptr
                   ? Status::FailedPrecondition("no cross memory attach here")
                   : shared.cma->Write(h.sender(), h.cma_address(), snapshot->data(), bytes);
    if (!s.ok()) return s;
    r.header.set_cma_length(static_cast<int64_t>(bytes));
  } else if (h.shm_length() != 0) {
    // The co-located transport: the values go into the slot the worker named (the network
    // thread checked it lies within the worker's segment and attached it as the payload).
    if (coded || m.payload.size() != 1 || m.payload[0].size() != bytes) {
      return Status::SizeMismatch(fmt::format(
          "partition {}: a shared memory pull needs a raw slot of {} bytes", p.id, bytes));
    }
    std::memcpy(m.payload[0].data(), snapshot->data(), bytes);
    r.header.set_shm_length(static_cast<int64_t>(bytes));
  } else if (coded) {
    auto codec = PullCodecAllowed(h.codec())
                     ? shared.codecs->Get(h.codec())
                     : StatusOr<std::shared_ptr<const compress::Codec>>(Status::InvalidArgument(
                           fmt::format("pulls may use codec none or fp16, not '{}'", h.codec())));
    if (!codec.ok()) return codec.status();
    std::vector<uint8_t> encoded;
    (*codec)->Encode(snapshot->data(), p.length, {}, nullptr, encoded);
    r.header.set_codec(h.codec());
    r.payload.push_back(OwnedFrame(std::move(encoded)));
  } else {
    auto* held = new Snapshot(std::move(snapshot));  // released when ZeroMQ has sent it
    r.payload.emplace_back(
        const_cast<float*>((*held)->data()), bytes,
        [](void*, void* hint) { delete static_cast<Snapshot*>(hint); }, held);
  }
  return Status();
}

DataReply ServePull(const ServingState& shared, Message& m, int64_t min_clock,
                    PartitionState& part) {
  using Snapshot = std::shared_ptr<const std::vector<float>>;
  const proto::Header& h = m.header;
  const Partition& p = part.info();
  Snapshot snapshot = part.Snapshot();
  DataReply r;
  r.header = ReplyTo(h, proto::PULL_REPLY, shared.self);
  r.header.set_dtype(proto::FLOAT32);
  r.header.set_num_elements(p.length);
  r.header.set_version(part.version());
  r.header.set_min_clock(min_clock);
  if (Status st = PullPayload(shared, m, p, std::move(snapshot), r); !st.ok()) {
    return {ErrorReply(h, st, shared.self), {}};
  }
  if (part.aggregator()->tracks_reads()) {  // the aggregator remembers what each worker read
    proto::LogRecord record;
    record.set_kind(proto::LogRecord::PULL);
    record.set_worker(h.sender());
    if (Status s = Log(shared, part, record); !s.ok()) return {ErrorReply(h, s, shared.self), {}};
    ApplyRecord(shared, part, record, nullptr, nullptr);
  }
  return r;
}

// The log record of a push or init: everything its application depends on.
proto::LogRecord UpdateRecord(const DataRequest& req) {
  const proto::Header& h = req.message.header;
  proto::LogRecord record;
  record.set_kind(h.type() == proto::PUSH ? proto::LogRecord::PUSH : proto::LogRecord::INIT);
  record.set_worker(h.sender());
  record.set_clock(h.clock());
  record.set_base_version(h.version());
  record.set_weight(h.weight());
  record.set_layer(h.layer());
  record.set_window(req.window);
  if (h.has_loss()) record.set_loss(h.loss());
  record.set_hold(req.hold);  // synchronous consistency: applied with its round (CompleteRound)
  record.set_incarnation(h.incarnation());
  record.set_seq(h.seq());
  *record.mutable_contributions() = h.contributions();
  return record;
}

// Whether an aggregator's sum was applied before (docs/aggregation-tier.md). A sum is applied
// whole or not at all, and only as the next update of each worker it holds: then what a
// worker's partition has applied stays a prefix of its numbered pushes, and a push it resends
// directly (its aggregator died or refused) is recognised as applied or not, whichever way the
// sum went. A sum partly applied, or one that would skip a push, is refused: its workers send
// its pushes directly instead.
StatusOr<bool> SumApplied(const PartitionState& part, const proto::Header& h) {
  int applied = 0;
  for (const proto::Contribution& c : h.contributions()) {
    if (part.Applied(c.incarnation(), c.seq())) {
      ++applied;
    } else if (part.Applied(c.incarnation(), c.seq() - 1) != (c.seq() > 1)) {
      return Status::FailedPrecondition(fmt::format(
          "partition {}: worker {}'s push {} in aggregator {}'s sum is not its next; the sum is "
          "refused (the workers push directly)",
          part.info().id, c.worker(), c.seq(), h.sender()));
    }
  }
  if (applied == 0) return false;
  if (applied == h.contributions_size()) return true;
  return Status::FailedPrecondition(
      fmt::format("partition {}: {} of the {} pushes in aggregator {}'s sum were applied before; "
                  "the sum is refused (the workers push directly)",
                  part.info().id, applied, h.contributions_size(), h.sender()));
}

// A push (held for its round, or handed to the aggregator) or an init, after validation:
// applied once (a numbered update seen before is acknowledged again, not applied), logged,
// answered, then applied.
void ServeUpdate(const ServingState& shared, DataRequest& req, PartitionState& part,
                 const float* data, const ReplyFn& send) {
  Message& m = req.message;
  const proto::Header& h = m.header;
  const bool push = h.type() == proto::PUSH;
  auto reply = [&](DataReply&& r) {
    if (push) {
      CountPush(shared, part.info(), m.payload[0].size(), r.header.staleness());
    }
    send(std::move(r));
  };
  DataReply r;
  r.header = ReplyTo(h, push ? proto::PUSH_REPLY : proto::INIT_REPLY, shared.self);
  // The version the update was taken at (it is applied after the reply leaves).
  r.header.set_version(part.version());
  bool duplicate = part.Applied(h.incarnation(), h.seq());
  if (!h.contributions().empty()) {
    StatusOr<bool> applied = SumApplied(part, h);
    if (applied.ok() && !*applied && part.aggregator()->tracks_reads()) {
      applied = Status::FailedPrecondition(fmt::format(
          "partition {}: the server's aggregator keeps what each worker read, which a sum of "
          "several workers' pushes cannot say; push directly",
          part.info().id));
    }
    if (!applied.ok()) return reply({ErrorReply(h, applied.status(), shared.self), {}});
    duplicate = *applied;
  }
  if (duplicate) {
    r.header.set_duplicate(true);
    if (Replicated(shared)) {
      // The first copy's record may still be on its way to the backups: the answer waits
      // behind a barrier shipped after it.
      proto::LogRecord barrier;
      barrier.set_kind(proto::LogRecord::BARRIER);
      return shared.replicator->Ship(part.info().id, barrier, nullptr, 0, nullptr, req.identity,
                                     &r.header, &r.payload);
    }
    return reply(std::move(r));
  }
  if (push && req.hold && part.HeldBy(h.sender()) >= PartitionState::kMaxHeldPerWorker) {
    return reply({ErrorReply(h,
                             Status::Unavailable(fmt::format(
                                 "worker {} has {} updates of partition {} waiting for rounds, "
                                 "the most one worker may; this one is refused",
                                 h.sender(), PartitionState::kMaxHeldPerWorker, part.info().id)),
                             shared.self),
                  {}});
  }
  // Staleness of a push: versions applied since the one it was computed from (ALGORITHMS.md
  // §3), recorded in its reply. A base from the future (a confused client) counts as fresh.
  const int64_t staleness = std::max<int64_t>(0, part.version() - h.version());
  const proto::LogRecord record = UpdateRecord(req);
  const bool logged = push || !part.initialized();  // a later init changes nothing
  if (logged) {
    if (Status s = Log(shared, part, record, data, /*ship=*/false); !s.ok()) {
      spdlog::error("{}", s.ToString());
      return reply(
          {ErrorReply(h, Status::Unavailable("not applied: " + s.message()), shared.self), {}});
    }
    FaultPoint("update.logged");
  }
  if (push) r.header.set_staleness(staleness);
  if (logged && Replicated(shared)) {
    // The reply waits for the backups' acknowledgements (the values are copied for them, so
    // a shared memory slot may be reused once it is answered).
    if (push)
      CountPush(shared, part.info(), m.payload.empty() ? 0 : m.payload[0].size(), staleness);
    shared.replicator->Ship(part.info().id, record, data, part.info().length,
                            m.payload.empty() || h.shm_length() != 0 ? nullptr : &m.payload[0],
                            req.identity, &r.header, &r.payload);
    ApplyRecord(shared, part, record, data, nullptr);
    MaybeCheckpointPartition(shared, part);
    return;
  }
  if (h.shm_length() != 0) {
    // The payload lies in the worker's shared memory, in a slot it reuses once answered: applied
    // first, and a held update copied out of it (no frame to take over).
    ApplyRecord(shared, part, record, data, nullptr);
    MaybeCheckpointPartition(shared, part);
    return reply(std::move(r));
  }
  reply(std::move(r));
  FaultPoint("update.answered");
  ApplyRecord(shared, part, record, data, m.payload.empty() ? nullptr : &m.payload[0]);
  MaybeCheckpointPartition(shared, part);
}

// A push or init whose payload lies at cma_address in the worker's memory: read into a frame.
Status ReadLent(const ServingState& shared, Message& m) {
  const proto::Header& h = m.header;
  const auto bytes = static_cast<size_t>(h.cma_length());
  const Partition& p = shared.store->Find(h.partition())->info();
  if (!h.codec().empty() || bytes != static_cast<size_t>(p.length) * sizeof(float)) {
    return Status::SizeMismatch(
        fmt::format("partition {}: a cross memory update must be {} raw bytes, not {}", p.id,
                    static_cast<size_t>(p.length) * sizeof(float), bytes));
  }
  if (shared.cma == nullptr) return Status::FailedPrecondition("no cross memory attach here");
  zmq::message_t frame(bytes);
  if (Status s = shared.cma->Read(h.sender(), h.cma_address(), frame.data(), bytes); !s.ok()) {
    return s;
  }
  m.payload.push_back(std::move(frame));
  return Status();
}

}  // namespace

void ServeData(const ServingState& shared, DataRequest& req, std::vector<float>& scratch,
               const ReplyFn& reply) {
  Message& m = req.message;
  const proto::Header& h = m.header;
  PartitionState* part = shared.store->Find(h.partition());
  if (part->table() != nullptr) return ServeTable(shared, req, *part, reply);
  if (!part->initialized() && h.type() != proto::INIT) {
    return reply({ErrorReply(h,
                             Status::FailedPrecondition(fmt::format(
                                 "partition {} is not initialized yet (init=worker: a worker must "
                                 "Init it first)",
                                 part->info().id)),
                             shared.self),
                  {}});
  }
  if (h.type() == proto::PULL) return reply(ServePull(shared, m, req.min_clock, *part));
  if (h.cma_length() != 0) {
    // Cross memory attach: read from the caller's array into a buffer of our own, after which
    // the update is served as one that came in a frame (answered before it is applied).
    if (Status s = ReadLent(shared, m); !s.ok()) return reply({ErrorReply(h, s, shared.self), {}});
  }
  if (Status s = CheckPayload(h, m, part->info()); !s.ok()) {
    spdlog::warn("rejected {} from node {}: {}", proto::MsgType_Name(h.type()), h.sender(),
                 s.ToString());
    return reply({ErrorReply(h, s, shared.self), {}});
  }
  if (h.codec().empty()) {
    return ServeUpdate(shared, req, *part, FloatsOf(m.payload[0], scratch), reply);
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
    return reply({ErrorReply(h, s, shared.self), {}});
  }
  ServeUpdate(shared, req, *part, scratch.data(), reply);
}

DataReply ServeData(const ServingState& shared, DataRequest& req, std::vector<float>& scratch) {
  DataReply out;
  ServeData(shared, req, scratch, [&out](DataReply&& r) { out = std::move(r); });
  return out;
}

}  // namespace hetps
