#include "hetps/client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <optional>

#include "common/allocator.h"
#include "common/compress/codec.h"
#include "common/shard_map.h"
#include "worker/client_impl.h"
#include "worker/client_io.h"
#include "worker/client_report.h"
#include "worker/transport.h"

namespace hetps {

Status Ticket::Wait() const {
  if (!state_) return Status();
  if (state_->gate) LeadUntilDone(*state_);  // ClientOptions::caller_io
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->remaining <= 0; });
  return state_->status;
}

bool Ticket::Done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->remaining <= 0;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { (void)Finish(); }

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.scheduler.empty()) return Status::InvalidArgument("no scheduler endpoint given");
  auto push = compress::LayerCodecs::Parse(options.push_codec);
  if (!push.ok()) return Status::InvalidArgument("push codec: " + push.status().message());
  auto pull = compress::ParseCodecSpec(options.pull_codec);
  if (!pull.ok()) return Status::InvalidArgument("pull codec: " + pull.status().message());
  if (pull->name != "none" && (pull->name != "fp16" || !pull->params.empty() || pull->ef)) {
    return Status::InvalidArgument(
        fmt::format("pull codec: '{}' (pulls may use none or fp16)", options.pull_codec));
  }
  if (auto transports = TransportsFor(options.transport); !transports.ok()) {
    return transports.status();
  }
  auto auth =
      LoadAuth(AuthFlags{options.auth, options.keys_dir, options.key_name}, KeyRole::kWorker);
  if (!auth.ok()) return auth.status();
  if (options.tune_allocator) TuneAllocatorForTransfers();
  auto impl = std::make_unique<Impl>(options, std::move(*auth));
  impl->push_codecs = *push;
  if (pull->name != "none") {
    impl->pulls.codec = pull->WireName();
    impl->pulls.decoder = *compress::MakeCodec(*pull);
  }
  if (Status s = impl->io.Start(impl->clock); !s.ok()) return s;
  // > 0: it joined a running cluster, or the run resumed from a whole-run checkpoint.
  impl->clock = impl->io.view().proto().start_clock();
  if (impl->clock > 0) {
    spdlog::info("rank {} starts at clock {} (a running cluster or a resumed run)", impl->io.rank(),
                 impl->clock.load());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

int32_t Client::id() const { return impl_->io.id(); }
int Client::rank() const { return impl_->io.rank(); }
int Client::num_workers() const { return impl_->io.view().num_workers(); }
int Client::num_servers() const { return impl_->io.num_servers(); }
bool Client::scheduler_runs_rounds() const {
  return impl_->io.view().proto().policy().scheduler_rounds();
}

std::string Client::consistency() const { return impl_->io.view().proto().policy().consistency(); }
int64_t Client::clock() const { return impl_->clock.load(); }
const ShardMap& Client::shard_map() const { return *impl_->map; }

ClientStats Client::stats() const { return impl_->report.Stats(); }

Status Client::DeclareTensors(const std::vector<TensorSpec>& tensors) {
  if (Status s = impl_->Open(); !s.ok()) return s;
  if (impl_->map) return Status::FailedPrecondition("tensors were already declared");
  proto::Header h;
  h.set_type(proto::DECLARE_TENSORS);
  std::vector<TensorSpec> declared = tensors;
  {
    std::lock_guard lock(impl_->tables_mu);
    declared.insert(declared.end(), impl_->tables.begin(), impl_->tables.end());
  }
  for (const TensorSpec& t : declared) *h.add_tensors() = ToProto(t);
  auto reply = impl_->io.Call(std::move(h));
  if (!reply.ok()) return reply.status();
  auto map = ShardMapFromProto(reply->shard_map());
  if (!map.ok()) return map.status();
  // The layer-wise schedule comes with the map, so the first step already follows it (a
  // heartbeat's copy would arrive some steps in, at a time that depends on the host).
  if (reply->has_layer_schedule()) impl_->report.SetLayerSchedule(reply->layer_schedule());
  for (const TensorSpec& t : declared) {
    if (map->TensorId(t.name) < 0) {
      return Status::Internal(fmt::format("the shard map lacks declared tensor '{}'", t.name));
    }
  }
  impl_->pulls.base_versions = std::make_unique<std::atomic<int64_t>[]>(map->partitions().size());
  impl_->encoders.resize(map->partitions().size());
  for (const Partition& p : map->partitions()) {
    const TensorSpec& t = map->tensors()[p.tensor_id];
    const compress::CodecSpec& spec = impl_->push_codecs.For(t.layer);
    if (spec.name == "none" || t.is_table()) continue;  // tables push raw rows
    auto codec = compress::MakeCodec(spec);
    if (!codec.ok()) return codec.status();
    auto e = std::make_unique<Impl::Encoder>();
    e->encoder = std::make_unique<compress::PartitionEncoder>(*codec, spec.ef, p.length);
    e->wire_name = spec.WireName();
    e->cols = compress::RowLength(t.shape, p.offset, p.length);
    impl_->encoders[p.id] = std::move(e);
  }
  impl_->map = std::move(*map);
  impl_->report.StartIterations();  // the first iteration starts now
  return CheckTables();
}

namespace {

// Cuts a tensor-sized request into one request per partition.
StatusOr<int32_t> Resolve(const std::optional<ShardMap>& map, const std::string& tensor, int64_t n,
                          const void* buffer) {
  if (!map) return Status::FailedPrecondition("DeclareTensors first");
  const int32_t id = map->TensorId(tensor);
  if (id < 0) return Status::NotFound(fmt::format("unknown tensor '{}'", tensor));
  if (map->tensors()[id].is_table()) {
    return Status::InvalidArgument(
        fmt::format("'{}' is a sparse table: use PushRows and PullRows", tensor));
  }
  const int64_t want = map->tensors()[id].NumElements();
  if (n != want) {
    return Status::SizeMismatch(
        fmt::format("tensor '{}' has {} elements, the buffer {}", tensor, want, n));
  }
  if (buffer == nullptr) return Status::InvalidArgument("null buffer");
  return id;
}

// The partitions of every tensor of a many-tensor call, each checked before anything is sent.
struct Resolved {
  std::vector<const std::vector<int32_t>*> parts;  // per tensor
  int count = 0;                                   // partitions in all
};
template <typename View>
StatusOr<Resolved> ResolveAll(const std::optional<ShardMap>& map, const std::vector<View>& views) {
  Resolved r;
  for (const View& v : views) {
    auto id = Resolve(map, v.tensor, v.n, v.data);
    if (!id.ok()) return id.status();
    r.parts.push_back(&map->PartitionsOf(*id));
    r.count += static_cast<int>(r.parts.back()->size());
  }
  return r;
}

}  // namespace

Ticket Client::Send(Update kind, const std::vector<ConstTensorView>& tensors, double weight) {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto resolved = ResolveAll(impl_->map, tensors);
  if (!resolved.ok()) return Ticket(FailedOp(resolved.status()));
  const auto& [parts, count] = *resolved;
  // One reply plus one release of the caller's buffer per partition.
  auto op = std::make_shared<Ticket::State>(2 * count);
  std::vector<Outgoing> batch;
  batch.reserve(count);
  const proto::MsgType type = kind == Update::kPush ? proto::PUSH : proto::INIT;
  const int64_t step = clock();
  int64_t sent_bytes = 0, raw_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const float* data = tensors[i].data;
    raw_bytes += tensors[i].n * static_cast<int64_t>(sizeof(float));
    for (int32_t pid : *parts[i]) {
      const Partition& p = impl_->map->partitions()[pid];
      Outgoing& o = batch.emplace_back();
      impl_->UpdateRequest(o, type, pid, op, step, weight);
      Impl::Encoder* enc = type == proto::PUSH ? impl_->encoders[pid].get() : nullptr;
      if (enc != nullptr) {
        // Encoded on this thread into a frame ZeroMQ owns: the caller's buffer is free at once.
        std::vector<uint8_t> bytes;
        compress::CodecContext ctx;
        ctx.key = {0, pid, step};
        ctx.cols = enc->cols;
        {
          std::lock_guard<std::mutex> lock(enc->mu);
          if (Status s = enc->encoder->Encode(data + p.offset, ctx, bytes); !s.ok()) {
            return Ticket(FailedOp(s));
          }
        }
        o.header.set_codec(enc->wire_name);
        sent_bytes += static_cast<int64_t>(bytes.size());
        // Shared with the frame, so a restarted server can be sent the same bytes again.
        auto encoded = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
        o.payload.push_back(SharedFrame(encoded));
        o.encoded = std::move(encoded);
        op->Complete(Status());
      } else {
        const size_t bytes = static_cast<size_t>(p.length) * sizeof(float);
        o.payload.emplace_back(const_cast<float*>(data + p.offset), bytes, ReleaseCallerBuffer,
                               new OpPtr(op));
        o.src = data + p.offset;
        o.src_bytes = bytes;
        sent_bytes += static_cast<int64_t>(bytes);
      }
    }
  }
  impl_->report.OnPushed(sent_bytes, raw_bytes);
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

Ticket Client::PushEncoded(const std::string& tensor, int64_t n, const PartitionEncoder& encode,
                           double weight) {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto id = Resolve(impl_->map, tensor, n, &encode);
  if (!id.ok()) return Ticket(FailedOp(id.status()));
  if (!encode) return Ticket(FailedOp(Status::InvalidArgument("PushEncoded: no encoder")));
  const std::vector<int32_t>& parts = impl_->map->PartitionsOf(*id);
  const TensorSpec& t = impl_->map->tensors()[*id];
  const compress::CodecSpec& spec = impl_->push_codecs.For(t.layer);
  const bool raw = spec.name == "none";
  const std::string codec = spec.ToString(), wire_name = spec.WireName();
  auto op = std::make_shared<Ticket::State>(static_cast<int>(parts.size()));
  std::vector<Outgoing> batch;
  const int64_t step = clock();
  int64_t sent_bytes = 0;
  for (int32_t pid : parts) {
    const Partition& p = impl_->map->partitions()[pid];
    PartitionSlice slice;
    slice.partition = pid;
    slice.offset = p.offset;
    slice.length = p.length;
    slice.codec = codec;
    slice.step = step;
    slice.cols = compress::RowLength(t.shape, p.offset, p.length);
    std::vector<uint8_t> bytes;
    if (Status s = encode(slice, bytes); !s.ok()) return Ticket(FailedOp(s));
    if (raw && bytes.size() != static_cast<size_t>(p.length) * sizeof(float)) {
      return Ticket(FailedOp(Status::SizeMismatch(
          fmt::format("PushEncoded '{}': partition {} is {} raw floats, the encoder gave {} bytes",
                      tensor, pid, p.length, bytes.size()))));
    }
    Outgoing& o = batch.emplace_back();
    impl_->UpdateRequest(o, proto::PUSH, pid, op, step, weight);
    if (!raw) o.header.set_codec(wire_name);
    sent_bytes += static_cast<int64_t>(bytes.size());
    auto encoded = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    o.payload.push_back(SharedFrame(encoded));
    o.encoded = std::move(encoded);
  }
  impl_->report.OnPushed(sent_bytes, n * static_cast<int64_t>(sizeof(float)));
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

StatusOr<std::string> Client::PushCodecOf(const std::string& tensor) const {
  if (!impl_->map) return Status::FailedPrecondition("DeclareTensors first");
  const int32_t id = impl_->map->TensorId(tensor);
  if (id < 0) return Status::NotFound(fmt::format("unknown tensor '{}'", tensor));
  return impl_->push_codecs.For(impl_->map->tensors()[id].layer).ToString();
}

Ticket Client::Push(const std::string& tensor, const float* grad, int64_t n, double weight) {
  return Send(Update::kPush, {{tensor, grad, n}}, weight);
}

Ticket Client::Push(const std::vector<ConstTensorView>& grads, double weight) {
  return Send(Update::kPush, grads, weight);
}

Ticket Client::Init(const std::string& tensor, const float* values, int64_t n) {
  return Send(Update::kInit, {{tensor, values, n}}, 0.0);
}

Ticket Client::Pull(const std::string& tensor, float* out, int64_t n) {
  return Pull(std::vector<TensorView>{{tensor, out, n}});
}

Ticket Client::Pull(const std::vector<TensorView>& into) {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto resolved = ResolveAll(impl_->map, into);
  if (!resolved.ok()) return Ticket(FailedOp(resolved.status()));
  const auto& [parts, count] = *resolved;
  auto op = std::make_shared<Ticket::State>(count);
  std::vector<Outgoing> batch;
  batch.reserve(count);
  const int64_t step = clock();
  for (size_t i = 0; i < into.size(); ++i) {
    for (int32_t pid : *parts[i]) {
      const Partition& p = impl_->map->partitions()[pid];
      Outgoing& o = batch.emplace_back();
      o.target = p.server_rank;
      o.op = op;
      o.header.set_type(proto::PULL);
      o.header.set_partition(pid);
      o.header.set_codec(impl_->pulls.codec);
      o.header.set_clock(step);
      o.header.set_dtype(proto::FLOAT32);
      o.dst = into[i].data + p.offset;
      o.dst_len = p.length;
    }
  }
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

void Client::BeginIteration() { impl_->report.BeginIteration(); }

void Client::SetLoss(double loss) { impl_->loss.store(loss, std::memory_order_relaxed); }

LayerPeriods Client::layer_schedule() const { return impl_->report.LayerSchedule(); }

void Client::SetDevice(const std::string& device) { impl_->report.SetDevice(device); }

void Client::ReportLayer(int32_t layer, double grad_norm_sq, double weight_norm_sq,
                         int64_t deferred_bytes) {
  impl_->report.OnLayer(layer, grad_norm_sq, weight_norm_sq, deferred_bytes);
}

void Client::ReportMetrics(const std::map<std::string, double>& metrics) {
  impl_->report.AddMetrics(clock(), metrics);
}

Status Client::Clock() {
  const auto entered = impl_->report.EnterClock();
  Status s = ClockAsync().Wait();
  impl_->report.LeaveClock(entered);
  return s;
}

Ticket Client::ClockAsync() {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto op = std::make_shared<Ticket::State>(1);  // one more per rank as it goes (kEveryServer)
  // Usually the next clock; a controller may move a late worker up to the open round (backup).
  op->then = [this, state = op.get()] { impl_->clock = std::max(clock() + 1, state->max_clock); };
  std::vector<Outgoing> batch(1);
  batch[0].target = kEveryServer;
  batch[0].op = op;
  batch[0].header.set_type(proto::CLOCK);
  batch[0].header.set_clock(clock());
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

Status Client::Barrier() {
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::BARRIER);
  h.set_clock(clock());
  return impl_->io.Call(std::move(h)).status();
}

StatusOr<int64_t> Client::AwaitRound() {
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::ROUND_CHECKIN);
  h.set_clock(clock());
  impl_->AttachRoundBytes(h.mutable_fed_round());
  proto::ClientProfile* profile = h.mutable_fed_round()->mutable_profile();
  profile->set_slowdown(impl_->device_slowdown);
  profile->set_up_mbps(impl_->link.up_mbps);
  profile->set_down_mbps(impl_->link.down_mbps);
  profile->set_latency_ms(impl_->link.latency_ms);
  profile->set_loss(impl_->link.loss);
  if (impl_->virtual_clock) h.mutable_fed_round()->set_virtual_time(impl_->virtual_time);
  auto r = impl_->io.Call(std::move(h));
  if (!r.ok()) return r.status();
  if (r->type() != proto::ROUND_TASK) {
    return Status::Malformed(fmt::format("the scheduler answered a round check-in with {}",
                                         proto::MsgType_Name(r->type())));
  }
  impl_->TakeVirtualTime(r->fed_round());
  impl_->secagg = r->fed_round().has_secagg() ? r->fed_round().secagg().SerializeAsString() : "";
  impl_->round_clip = std::max(0.0, r->fed_round().dp_clip());
  impl_->round_update_noise = std::max(0.0, r->fed_round().dp_update_noise());
  impl_->round_count_noise = std::max(0.0, r->fed_round().dp_count_noise());
  if (r->fed_round().finished()) return int64_t{-1};
  if (r->fed_round().round() < 0) {
    return Status::Malformed(
        fmt::format("the scheduler selected this client for round {}", r->fed_round().round()));
  }
  impl_->clock = r->fed_round().round();
  return r->fed_round().round();
}

StatusOr<Client::RoundsClosed> Client::AwaitRoundsClosed(
    int64_t rounds, const std::optional<Evaluation>& measured) {
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::ROUND_WATCH);
  h.mutable_fed_round()->set_round(rounds);
  if (measured) {
    proto::Evaluation* e = h.mutable_fed_round()->mutable_evaluation();
    e->set_round(measured->round);
    e->set_loss(measured->loss);
    e->set_accuracy(measured->accuracy);
  }
  auto r = impl_->io.Call(std::move(h));
  if (!r.ok()) return r.status();
  if (r->type() != proto::ROUND_WATCH ||
      (r->fed_round().round() < rounds && !r->fed_round().finished())) {
    return Status::Malformed(fmt::format("the scheduler answered a wait for {} rounds with {} ({})",
                                         rounds, proto::MsgType_Name(r->type()),
                                         r->fed_round().round()));
  }
  impl_->TakeVirtualTime(r->fed_round());
  return RoundsClosed{r->fed_round().round(), r->fed_round().finished()};
}

StatusOr<bool> Client::FinishRound(const ClipBit& bit) {
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::ROUND_UPLOADED);
  h.set_clock(clock());
  h.mutable_fed_round()->set_round(clock());
  if (bit.within) h.mutable_fed_round()->set_within_clip(*bit.within);
  if (bit.noisy) h.mutable_fed_round()->set_within_noisy(*bit.noisy);
  if (bit.masked) h.mutable_fed_round()->set_within_masked(*bit.masked);
  impl_->AttachRoundBytes(h.mutable_fed_round());
  if (impl_->virtual_clock) h.mutable_fed_round()->set_virtual_time(impl_->virtual_time);
  auto r = impl_->io.Call(std::move(h));
  if (!r.ok()) return r.status();
  if (r->type() != proto::ROUND_UPLOADED || r->fed_round().round() != clock()) {
    return Status::Malformed("the scheduler's answer to an upload report names another round");
  }
  impl_->TakeVirtualTime(r->fed_round());
  impl_->secagg = r->fed_round().has_secagg() ? r->fed_round().secagg().SerializeAsString() : "";
  return r->fed_round().kept();
}

const std::string& Client::round_secagg() const { return impl_->secagg; }

double Client::round_clip() const { return impl_->round_clip; }
double Client::round_update_noise() const { return impl_->round_update_noise; }
double Client::round_count_noise() const { return impl_->round_count_noise; }

StatusOr<std::string> Client::ExchangeSecAgg(const std::string& request) {
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::SECAGG);
  if (!h.mutable_secagg()->ParseFromString(request)) {
    return Status::InvalidArgument("a secure-aggregation request that does not parse");
  }
  auto r = impl_->io.Call(std::move(h));
  if (!r.ok()) return r.status();
  if (r->type() != proto::SECAGG) {
    return Status::Malformed(fmt::format("the scheduler answered a secure-aggregation step with {}",
                                         proto::MsgType_Name(r->type())));
  }
  return r->secagg().SerializeAsString();
}

Status Client::Finish() {
  if (impl_->finished.exchange(true)) return Status();
  // The last worker's LEAVE shuts the servers down: what is in flight is answered first,
  // within the one grace a stop gives unanswered requests (the stop gets what is left of it).
  const int grace_left_ms = impl_->io.AwaitServers(kStopGraceMs);
  proto::Header h;
  h.set_type(proto::LEAVE);
  Status s = impl_->io.Call(std::move(h), kStopGraceMs).status();
  impl_->io.Stop(grace_left_ms);
  return s.code() == StatusCode::kAborted ? Status() : s;  // a cluster already shut down is fine
}

}  // namespace hetps
