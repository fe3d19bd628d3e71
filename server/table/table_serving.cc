#include "server/table/table_serving.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/consistency/controller.h"
#include "server/fault_point.h"
#include "server/table/table_bucket.h"

namespace hetps {
namespace {

// Keys one request may carry: a few thousand is a minibatch; this bounds a hostile count.
constexpr int64_t kMaxKeysPerRequest = int64_t{1} << 24;

bool TablesDefinedFor(ApplySchedule schedule) {
  return schedule == ApplySchedule::kOnArrival || schedule == ApplySchedule::kLockstepRounds;
}

// The frame's bytes as `T`s, in place when aligned, else copied into `scratch`.
template <typename T>
const T* View(const void* data, int64_t count, std::vector<T>& scratch) {
  if (reinterpret_cast<uintptr_t>(data) % alignof(T) == 0) return static_cast<const T*>(data);
  scratch.resize(static_cast<size_t>(count));
  std::memcpy(scratch.data(), data, static_cast<size_t>(count) * sizeof(T));
  return scratch.data();
}

DataReply ServeTablePull(const ServingState& shared, DataRequest& req, PartitionState& part,
                         uint32_t now) {
  const proto::Header& h = req.message.header;
  TableShard& shard = *part.table()->shard();
  const int64_t n = h.num_keys(), dim = shard.dim();
  std::vector<uint64_t> scratch;
  const uint64_t* keys = View<uint64_t>(req.message.payload[0].data(), n, scratch);
  DataReply r;
  r.header = ReplyTo(h, proto::PULL_REPLY, shared.self);
  r.header.set_dtype(proto::FLOAT32);
  r.header.set_num_elements(n * dim);
  r.header.set_num_keys(n);
  r.header.set_version(part.version());
  r.header.set_min_clock(req.min_clock);
  zmq::message_t rows(static_cast<size_t>(n * dim) * sizeof(float));
  shard.Pull(keys, n, static_cast<float*>(rows.data()), now);
  if (!h.codec().empty() && h.codec() != "none") {  // fp16, checked by CheckTableRequest
    auto codec = shared.codecs->Get(h.codec());
    if (!codec.ok()) return {ErrorReply(h, codec.status(), shared.self), {}};
    std::vector<uint8_t> encoded;
    (*codec)->Encode(static_cast<const float*>(rows.data()), n * dim, {}, nullptr, encoded);
    r.header.set_codec(h.codec());
    r.payload.push_back(OwnedFrame(std::move(encoded)));
  } else {
    r.payload.push_back(std::move(rows));
  }
  return r;
}

// Holds a push for its round, or applies it; `frame` holds its keys, then its rows.
Status ApplyTablePush(TableBucket& bucket, bool hold, int64_t clock, int32_t worker,
                      zmq::message_t&& frame, int64_t n, uint32_t now) {
  if (hold) {
    bucket.Hold(clock, worker, std::move(frame), n);
    return Status();
  }
  std::vector<uint64_t> key_scratch;
  std::vector<float> row_scratch;
  const auto* bytes = static_cast<const uint8_t*>(frame.data());
  const uint64_t* keys = View<uint64_t>(bytes, n, key_scratch);
  const float* rows =
      View<float>(bytes + n * sizeof(uint64_t), n * bucket.shard()->dim(), row_scratch);
  return bucket.shard()->Push(keys, n, rows, 1.0f, now);
}

DataReply ServeTablePush(const ServingState& shared, DataRequest& req, PartitionState& part,
                         uint32_t now) {
  Message& m = req.message;
  const proto::Header& h = m.header;
  TableBucket& bucket = *part.table();
  DataReply r;
  r.header = ReplyTo(h, proto::PUSH_REPLY, shared.self);
  r.header.set_version(part.version());
  if (part.Applied(h.incarnation(), h.seq())) {
    r.header.set_duplicate(true);
    return r;
  }
  r.header.set_staleness(std::max<int64_t>(0, part.version() - h.version()));
  if (req.hold && bucket.HeldBy(h.sender()) >= PartitionState::kMaxHeldPerWorker) {
    return {ErrorReply(h,
                       Status::Unavailable(fmt::format(
                           "worker {} has {} updates of table bucket {} waiting for rounds, the "
                           "most one worker may; this one is refused",
                           h.sender(), PartitionState::kMaxHeldPerWorker, part.info().id)),
                       shared.self),
            {}};
  }
  if (shared.durable != nullptr) {  // logged before it is applied, replayed the same way
    proto::LogRecord record;
    record.set_kind(proto::LogRecord::PUSH);
    record.set_worker(h.sender());
    record.set_clock(h.clock());
    record.set_base_version(h.version());
    record.set_hold(req.hold);
    record.set_incarnation(h.incarnation());
    record.set_seq(h.seq());
    record.set_num_keys(h.num_keys());
    record.set_stamp(now);
    const zmq::message_t& frame = m.payload[0];
    if (Status s =
            shared.durable->Append(part.info().id, record, static_cast<const float*>(frame.data()),
                                   static_cast<int64_t>(frame.size() / sizeof(float)));
        !s.ok()) {
      return {ErrorReply(h, Status::Unavailable("not applied: " + s.message()), shared.self), {}};
    }
    FaultPoint("update.logged");
  }
  if (Status s = ApplyTablePush(bucket, req.hold, h.clock(), h.sender(), std::move(m.payload[0]),
                                h.num_keys(), now);
      !s.ok()) {
    return {ErrorReply(h, s, shared.self), {}};
  }
  part.MarkApplied(h.incarnation(), h.seq());
  part.CountUpdate();
  MaybeCheckpointPartition(shared, part);
  return r;
}

}  // namespace

Status TablesDefinedUnder(const AlgorithmSpec& consistency, const AlgorithmSpec& aggregator) {
  if (!TablesDefinedFor(Controllers().EntryFor(consistency.name()).schedule)) {
    return Status::FailedPrecondition(
        fmt::format("sparse tables are not defined under consistency {} (they are under {})",
                    consistency.name(), fmt::join(TableControllers(), ", ")));
  }
  if (aggregator.Full() != Aggregators().Parse("sum")->Full()) {
    return Status::FailedPrecondition(fmt::format(
        "sparse tables are defined with the plain sum aggregator only, not {} (a table's "
        "row-wise rule is its optimizer)",
        aggregator.Full()));
  }
  return Status();
}

std::vector<std::string> TableControllers() {
  std::vector<std::string> names;
  for (const std::string& name : Controllers().Names()) {
    if (TablesDefinedFor(Controllers().EntryFor(name).schedule)) names.push_back(name);
  }
  return names;
}

void ReportTables(const ShardMap& map, PartitionStore& store, proto::ServerReport& report) {
  for (size_t t = 0; t < map.tensors().size(); ++t) {
    if (!map.tensors()[t].is_table()) continue;
    proto::TableReport* r = nullptr;
    for (int32_t id : map.PartitionsOf(static_cast<int32_t>(t))) {
      PartitionState* part = store.Find(id);
      if (part == nullptr || part->table() == nullptr || part->table()->shard() == nullptr)
        continue;
      const TableShard& shard = *part->table()->shard();
      if (r == nullptr) {
        r = report.add_tables();
        r->set_name(map.tensors()[t].name);
        r->set_row_bytes(shard.row_bytes());
      }
      const TableStats& s = shard.stats();
      r->set_rows(r->rows() + shard.rows());
      r->set_bytes(r->bytes() + shard.bytes());
      r->set_hits(r->hits() + s.hits);
      r->set_misses(r->misses() + s.misses);
      r->set_created(r->created() + s.created);
      r->set_evicted(r->evicted() + s.evicted);
      r->set_expired(r->expired() + s.expired);
      r->set_admitted(r->admitted() + s.admitted);
      r->set_dropped(r->dropped() + s.dropped);
      r->set_refused(r->refused() + s.refused);
    }
  }
}

Status CheckTableRequest(const proto::Header& h, const Message& m, const TensorSpec& table) {
  const bool push = h.type() == proto::PUSH;
  const std::string what = fmt::format("table '{}'", table.name);
  if (!push && h.type() != proto::PULL) {
    return Status::InvalidArgument(fmt::format(
        "{} takes PUSH and PULL only (its rows start from its initializer; INIT is for tensors)",
        what));
  }
  if (h.shm_length() != 0 || h.cma_length() != 0) {
    return Status::InvalidArgument(what + ": table requests travel in frames, not shm or cma");
  }
  const int64_t n = h.num_keys(), dim = table.table.dim;
  if (n < 0 || n > kMaxKeysPerRequest) {
    return Status::InvalidArgument(
        fmt::format("{}: {} keys in one request (at most {})", what, n, kMaxKeysPerRequest));
  }
  if (push && (!h.codec().empty() || h.dtype() != proto::FLOAT32)) {
    return Status::InvalidArgument(what + ": a push of rows is raw float32, without a codec");
  }
  if (!push && !h.codec().empty() && h.codec() != "none" && h.codec() != "fp16") {
    return Status::InvalidArgument(
        fmt::format("{}: pulls may use codec none or fp16, not '{}'", what, h.codec()));
  }
  if (push && h.num_elements() != n * dim) {
    return Status::SizeMismatch(
        fmt::format("{}: {} keys of dim {} are {} floats, the request says {}", what, n, dim,
                    n * dim, h.num_elements()));
  }
  const size_t want = static_cast<size_t>(n) * sizeof(uint64_t) +
                      (push ? static_cast<size_t>(n * dim) * sizeof(float) : 0);
  if (m.payload.size() != 1 || m.payload[0].size() != want) {
    return Status::SizeMismatch(
        fmt::format("{}: a {} of {} keys needs one frame of {} bytes, got {} frame(s) of {} bytes",
                    what, push ? "push" : "pull", n, want, m.payload.size(),
                    m.payload.empty() ? 0 : m.payload[0].size()));
  }
  return Status();
}

void ServeTable(const ServingState& shared, DataRequest& req, PartitionState& part,
                const ReplyFn& reply) {
  const proto::Header& h = req.message.header;
  TableBucket& bucket = *part.table();
  if (!bucket.error().ok()) return reply({ErrorReply(h, bucket.error(), shared.self), {}});
  const uint32_t now = bucket.Stamp(h.clock());
  bucket.MaybeExpire(now);
  reply(h.type() == proto::PULL ? ServeTablePull(shared, req, part, now)
                                : ServeTablePush(shared, req, part, now));
}

Status ReplayTablePush(PartitionState& part, const proto::LogRecord& r, const float* values,
                       int64_t n) {
  TableBucket& bucket = *part.table();
  if (bucket.shard() == nullptr) return bucket.error();
  const int64_t keys = r.num_keys(), dim = bucket.shard()->dim();
  if (keys < 0 || keys > kMaxKeysPerRequest ||
      n * static_cast<int64_t>(sizeof(float)) !=
          keys * static_cast<int64_t>(sizeof(uint64_t) + dim * sizeof(float))) {
    return Status::Malformed(
        fmt::format("a logged table push of {} floats for {} keys of dim {}", n, keys, dim));
  }
  bucket.MaybeExpire(r.stamp());
  zmq::message_t frame(values, static_cast<size_t>(n) * sizeof(float));
  // A push refused when served (a full table) is refused again, and stays unapplied.
  if (ApplyTablePush(bucket, r.hold(), r.clock(), r.worker(), std::move(frame), keys, r.stamp())
          .ok()) {
    part.MarkApplied(r.incarnation(), r.seq());
    part.CountUpdate();
  }
  return Status();
}

}  // namespace hetps
