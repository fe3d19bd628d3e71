#include "worker/client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <zmq.hpp>

#include "common/compress/codec.h"
#include "common/logging.h"
#include "common/message.h"
#include "common/scheduler_link.h"
#include "worker/client_report.h"

namespace hetps {

// Completion state of one operation: it is done when `remaining` reaches zero, counting one per
// outstanding reply and one per caller buffer ZeroMQ still holds.
struct Ticket::State {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  Status status;
  proto::Header reply;    // the last reply header (control operations read it)
  int64_t max_clock = 0;  // the largest clock any reply named (CLOCK: where to continue)

  explicit State(int n) : remaining(n) {}
  void Complete(const Status& s, const proto::Header* header = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok() && status.ok()) status = s;
    if (header != nullptr) {
      reply = *header;
      max_clock = std::max(max_clock, header->clock());
    }
    if (--remaining == 0) cv.notify_all();
  }
};

Status Ticket::Wait() const {
  if (!state_) return Status();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->remaining <= 0; });
  return state_->status;
}

bool Ticket::Done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->remaining <= 0;
}

namespace {

using OpPtr = std::shared_ptr<Ticket::State>;
constexpr int kToScheduler = -1;
constexpr int kStopGraceMs = 5000;  // how long Finish waits for unanswered requests

std::shared_ptr<Ticket::State> Failed(const Status& s) {
  auto op = std::make_shared<Ticket::State>(1);
  op->Complete(s);
  return op;
}

// ZeroMQ calls this (from its I/O thread) when it no longer needs a caller's buffer.
void ReleaseCallerBuffer(void* /*data*/, void* hint) {
  auto* op = static_cast<OpPtr*>(hint);
  (*op)->Complete(Status());
  delete op;
}

// A request on its way to a server (rank >= 0) or the scheduler.
struct Outgoing {
  int target = kToScheduler;
  proto::Header header;
  std::vector<zmq::message_t> payload;
  OpPtr op;
  float* dst = nullptr;  // PULL: where the partition's values go
  int64_t dst_len = 0;
};

// A request sent and not yet answered.
struct Pending {
  int target;
  OpPtr op;
  float* dst;
  int64_t dst_len;
  int64_t clock;
  proto::MsgType type;  // of the request
  int32_t partition;    // data requests: the partition asked about
};

// The reply a server owes a request of `type`.
proto::MsgType ReplyTypeOf(proto::MsgType type) {
  switch (type) {
    case proto::PUSH:
      return proto::PUSH_REPLY;
    case proto::PULL:
      return proto::PULL_REPLY;
    case proto::INIT:
      return proto::INIT_REPLY;
    case proto::CLOCK:
      return proto::CLOCK_REPLY;
    default:
      return proto::MSG_UNKNOWN;
  }
}

// A server's reply is untrusted input, exactly as a request is to a server: its type must be
// the one the request is owed (or ERROR), and a data reply must name the partition asked about.
// Only then may anything index per-partition state or write to the caller's buffer.
Status CheckReply(const proto::Header& h, const Pending& p, int from) {
  if (h.type() == proto::ERROR) return Status();
  if (h.type() != ReplyTypeOf(p.type)) {
    return Status::Malformed(fmt::format("server rank {} answered {} with {}", from,
                                         proto::MsgType_Name(p.type),
                                         proto::MsgType_Name(h.type())));
  }
  if (p.type != proto::CLOCK && h.partition() != p.partition) {
    return Status::Malformed(fmt::format("server rank {} answered partition {} about partition {}",
                                         from, p.partition, h.partition()));
  }
  if (p.type == proto::CLOCK && h.clock() <= p.clock) {
    return Status::Malformed(
        fmt::format("server rank {} let clock {} continue at clock {}", from, p.clock, h.clock()));
  }
  if (p.type == proto::PUSH && h.staleness() < 0) {
    return Status::Malformed(
        fmt::format("server rank {} reported a negative staleness {}", from, h.staleness()));
  }
  return Status();
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options)
      : options_(options),
        link_(ctx_, options.scheduler, proto::WORKER, "", options.heartbeat_interval_ms),
        wake_in_(ctx_, zmq::socket_type::pull),
        wake_out_(ctx_, zmq::socket_type::push) {}

  ~Impl() { StopIoThread(); }

  Status Start() {
    static const std::atomic<bool> never{false};
    const std::atomic<bool>& stop = options_.stop ? *options_.stop : never;
    if (options_.rank >= 0) link_.registration().set_rank(options_.rank);
    if (Status s = link_.Join(stop, options_.join_timeout_ms); !s.ok()) return s;
    SetLogNode("worker", link_.id());
    for (const proto::NodeInfo& server : link_.view().servers()) {
      zmq::socket_t& sock = servers_.emplace_back(ctx_, zmq::socket_type::dealer);
      sock.set(zmq::sockopt::routing_id, NodeIdentity(link_.id()));
      sock.set(zmq::sockopt::sndhwm, 0);
      sock.set(zmq::sockopt::rcvhwm, 0);
      sock.set(zmq::sockopt::linger, 0);
      sock.connect(server.address());
    }
    link_.SetReporter([this](proto::Header& h) { FillReport(h); });
    wake_in_.bind(fmt::format("inproc://client-wake-{}", link_.id()));
    wake_out_.connect(fmt::format("inproc://client-wake-{}", link_.id()));
    io_thread_ = std::thread([this] { IoLoop(); });
    return Status();
  }

  const ClusterView& view() const { return link_.view(); }
  int32_t id() const { return link_.id(); }
  int rank() const { return link_.rank(); }
  std::optional<ShardMap> map;
  // Per partition: the version of its last pulled values, the base a later push was computed
  // from. Written by the I/O thread, read by pushing threads.
  std::unique_ptr<std::atomic<int64_t>[]> base_versions;
  std::atomic<int64_t> clock{0};
  // Compression: the push codec of each layer, and per partition its encoder (null: raw).
  compress::LayerCodecs push_codecs;
  std::string pull_codec;  // empty: raw
  std::shared_ptr<const compress::Codec> pull_decoder;
  struct Encoder {
    std::mutex mu;
    std::unique_ptr<compress::PartitionEncoder> encoder;
    std::string wire_name;
    int64_t cols = 0;
  };
  std::vector<std::unique_ptr<Encoder>> encoders;
  ClientReport report;  // what stats() and the heartbeats tell

  void FillReport(proto::Header& h) { report.Fill(clock.load(), *h.mutable_worker_report()); }

  // Queues requests for the I/O thread.
  void Submit(std::vector<Outgoing> batch) {
    std::lock_guard<std::mutex> lock(queue_mu_);
    const bool was_empty = queue_.empty();
    for (Outgoing& o : batch) queue_.push_back(std::move(o));
    if (was_empty) (void)wake_out_.send(zmq::message_t(), zmq::send_flags::none);
  }

  // Sends one control request to the scheduler and waits for its reply (at most `timeout_ms`
  // when positive).
  StatusOr<proto::Header> Call(proto::Header h, int timeout_ms = 0) {
    auto op = std::make_shared<Ticket::State>(1);
    Outgoing o;
    o.header = std::move(h);
    o.op = op;
    std::vector<Outgoing> batch;
    batch.push_back(std::move(o));
    Submit(std::move(batch));
    std::unique_lock<std::mutex> lock(op->mu);
    auto done = [&] { return op->remaining <= 0; };
    if (timeout_ms <= 0) {
      op->cv.wait(lock, done);
    } else if (!op->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
      return Status::DeadlineExceeded(
          fmt::format("no answer from the scheduler in {} ms", timeout_ms));
    }
    if (!op->status.ok()) return op->status;
    return op->reply;
  }

  // Lets in-flight requests finish (at most kStopGraceMs), then stops the I/O thread.
  void StopIoThread() {
    if (!io_thread_.joinable()) return;
    stopping_ = true;
    io_thread_.join();
  }
  std::atomic<bool> finished{false};

 private:
  void IoLoop();
  void SendQueued();
  void Dispatch(Outgoing& o);
  void OnReply(Envelope& env, int from);
  void OnControl(Envelope& env);
  void FailPending(int target, const Status& s);

  const ClientOptions options_;
  zmq::context_t ctx_{1};
  SchedulerLink link_;
  std::vector<zmq::socket_t> servers_;
  zmq::socket_t wake_in_, wake_out_;
  std::mutex queue_mu_;
  std::deque<Outgoing> queue_;
  std::thread io_thread_;
  std::atomic<bool> stopping_{false};
  // I/O thread only:
  uint64_t next_request_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_set<int> dead_servers_;
  std::optional<Status> closed_;  // set once the cluster shut down
};

void Client::Impl::IoLoop() {
  std::vector<zmq::pollitem_t> items;
  std::vector<int> ranks;  // items[i + 2] polls server ranks[i]
  std::optional<std::chrono::steady_clock::time_point> stop_deadline;
  while (true) {
    if (stopping_.load()) {
      SendQueued();  // anything submitted before the stop still goes out (or fails)
      if (pending_.empty() || closed_) break;
      auto now = std::chrono::steady_clock::now();
      if (!stop_deadline) stop_deadline = now + std::chrono::milliseconds(kStopGraceMs);
      if (now > *stop_deadline) {
        closed_ = Status::Aborted("the client stopped before the servers answered");
        for (auto& [id, p] : pending_) p.op->Complete(*closed_);
        pending_.clear();
        break;
      }
    }
    items.assign(
        {{wake_in_.handle(), 0, ZMQ_POLLIN, 0}, {link_.socket().handle(), 0, ZMQ_POLLIN, 0}});
    ranks.clear();
    for (int r = 0; r < static_cast<int>(servers_.size()); ++r) {
      if (dead_servers_.contains(r)) continue;
      items.push_back({servers_[r].handle(), 0, ZMQ_POLLIN, 0});
      ranks.push_back(r);
    }
    zmq::poll(items, std::chrono::milliseconds(100));
    link_.MaybeHeartbeat();
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t m;
      while (wake_in_.recv(m, zmq::recv_flags::dontwait)) {
      }
    }
    SendQueued();
    for (size_t i = 2; i < items.size(); ++i) {
      while (items[i].revents & ZMQ_POLLIN) {
        const int rank = ranks[i - 2];
        if (dead_servers_.contains(rank)) break;
        auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
        if (!env) break;
        OnReply(*env, rank);
      }
    }
    while (items[1].revents & ZMQ_POLLIN) {
      auto env = Receive(link_.socket(), zmq::recv_flags::dontwait, /*routed=*/false);
      if (!env) break;
      link_.Heard();
      OnControl(*env);
    }
    if (!closed_ && link_.SchedulerLost()) {
      spdlog::error("no word from the scheduler for {} ms; failing every request",
                    link_.view().proto().heartbeat_timeout_ms());
      closed_ = Status::Unavailable("lost the scheduler");
      for (auto& [id, p] : pending_) p.op->Complete(*closed_);
      pending_.clear();
    }
  }
}

void Client::Impl::SendQueued() {
  std::deque<Outgoing> batch;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    batch.swap(queue_);
  }
  for (Outgoing& o : batch) Dispatch(o);
}

void Client::Impl::Dispatch(Outgoing& o) {
  if (closed_) {
    o.payload.clear();  // releases the caller's buffers (their callbacks complete the op)
    o.op->Complete(*closed_);
    return;
  }
  if (o.target >= 0 && dead_servers_.contains(o.target)) {
    o.payload.clear();
    o.op->Complete(Status::Unavailable(fmt::format("server rank {} is dead", o.target)));
    return;
  }
  const uint64_t id = next_request_++;
  o.header.set_request_id(id);
  o.header.set_sender(link_.id());
  pending_[id] = Pending{
      o.target, o.op, o.dst, o.dst_len, o.header.clock(), o.header.type(), o.header.partition()};
  if (o.target == kToScheduler) {
    hetps::Send(link_.socket(), o.header, std::move(o.payload));
  } else {
    report.OnRequest();
    hetps::Send(servers_[o.target], o.header, std::move(o.payload));
  }
}

void Client::Impl::OnReply(Envelope& env, int from) {
  if (!env.status.ok()) {
    spdlog::warn("malformed reply from server rank {}: {}", from, env.status.ToString());
    return;
  }
  const proto::Header& h = env.message.header;
  auto it = pending_.find(h.request_id());
  if (it == pending_.end() || it->second.target != from) {
    spdlog::warn("reply {} from server rank {} matches no request", h.request_id(), from);
    return;
  }
  Pending p = it->second;
  pending_.erase(it);
  Status s = CheckReply(h, p, from);
  if (!s.ok()) {
    spdlog::warn("{}", s.ToString());
    p.op->Complete(s);
    return;
  }
  s = StatusOf(h);
  if (h.dropped()) report.OnDropped();
  if (s.ok() && h.type() == proto::PUSH_REPLY && !h.dropped()) report.OnPushAcked(h.staleness());
  if (s.ok() && h.type() == proto::PULL_REPLY) {
    const size_t want = static_cast<size_t>(p.dst_len) * sizeof(float);
    if (h.codec() != pull_codec) {
      s = Status::Malformed(
          fmt::format("server rank {} answered partition {} in codec '{}', not '{}'", from,
                      p.partition, h.codec(), pull_codec));
    } else if (env.message.payload.size() != 1 ||
               (pull_codec.empty() && env.message.payload[0].size() != want)) {
      s = Status::SizeMismatch(
          fmt::format("server rank {} answered partition {} with a wrong size", from, p.partition));
    } else if (!pull_codec.empty()) {
      s = pull_decoder->Decode(static_cast<const uint8_t*>(env.message.payload[0].data()),
                               env.message.payload[0].size(), p.dst_len, {}, p.dst);
    } else {
      std::memcpy(p.dst, env.message.payload[0].data(), want);
    }
    if (s.ok()) {
      base_versions[p.partition].store(h.version(), std::memory_order_relaxed);
      report.OnRead(static_cast<int64_t>(env.message.payload[0].size()),
                    std::max<int64_t>(0, p.clock - h.min_clock()));
    }
  }
  p.op->Complete(s, &h);
}

void Client::Impl::OnControl(Envelope& env) {
  if (!env.status.ok()) return;
  const proto::Header& h = env.message.header;
  switch (h.type()) {
    case proto::NODE_DEAD: {
      const proto::NodeInfo* node = link_.view().Node(h.node());
      if (node != nullptr && node->role() == proto::SERVER) {
        spdlog::error("server rank {} (node {}) is dead; its requests fail", node->rank(),
                      h.node());
        dead_servers_.insert(node->rank());
        servers_[node->rank()].close();  // drops queued frames, releasing the caller's buffers
        FailPending(node->rank(),
                    Status::Unavailable(fmt::format("server rank {} died", node->rank())));
      }
      return;
    }
    case proto::SHUTDOWN:
      spdlog::warn("the scheduler shut the cluster down");
      closed_ = Status::Aborted("the cluster was shut down");
      for (auto& [id, p] : pending_) p.op->Complete(*closed_);
      pending_.clear();
      return;
    default:
      break;
  }
  auto it = pending_.find(h.request_id());
  if (it == pending_.end() || it->second.target != kToScheduler) return;
  OpPtr op = it->second.op;
  pending_.erase(it);
  op->Complete(StatusOf(h), &h);
}

void Client::Impl::FailPending(int target, const Status& s) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.target == target) {
      it->second.op->Complete(s);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- Client ----

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
  auto impl = std::make_unique<Impl>(options);
  impl->push_codecs = *push;
  if (pull->name != "none") {
    impl->pull_codec = pull->WireName();
    impl->pull_decoder = *compress::MakeCodec(*pull);
  }
  if (Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

int32_t Client::id() const { return impl_->id(); }
int Client::rank() const { return impl_->rank(); }
int Client::num_workers() const { return impl_->view().num_workers(); }
int Client::num_servers() const { return impl_->view().num_servers(); }
std::string Client::consistency() const { return impl_->view().proto().policy().consistency(); }
int64_t Client::clock() const { return impl_->clock.load(); }
const ShardMap& Client::shard_map() const { return *impl_->map; }

ClientStats Client::stats() const { return impl_->report.Stats(); }

Status Client::DeclareTensors(const std::vector<TensorSpec>& tensors) {
  if (impl_->map) return Status::FailedPrecondition("tensors were already declared");
  proto::Header h;
  h.set_type(proto::DECLARE_TENSORS);
  for (const TensorSpec& t : tensors) *h.add_tensors() = ToProto(t);
  auto reply = impl_->Call(std::move(h));
  if (!reply.ok()) return reply.status();
  auto map = ShardMap::FromProto(reply->shard_map());
  if (!map.ok()) return map.status();
  for (const TensorSpec& t : tensors) {
    if (map->TensorId(t.name) < 0) {
      return Status::Internal(fmt::format("the shard map lacks declared tensor '{}'", t.name));
    }
  }
  impl_->base_versions = std::make_unique<std::atomic<int64_t>[]>(map->partitions().size());
  impl_->encoders.resize(map->partitions().size());
  for (const Partition& p : map->partitions()) {
    const TensorSpec& t = map->tensors()[p.tensor_id];
    const compress::CodecSpec& spec = impl_->push_codecs.For(t.layer);
    if (spec.name == "none") continue;
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
  return Status();
}

namespace {

// Cuts a tensor-sized request into one request per partition.
StatusOr<int32_t> Resolve(const std::optional<ShardMap>& map, const std::string& tensor, int64_t n,
                          const void* buffer) {
  if (!map) return Status::FailedPrecondition("DeclareTensors first");
  const int32_t id = map->TensorId(tensor);
  if (id < 0) return Status::NotFound(fmt::format("unknown tensor '{}'", tensor));
  const int64_t want = map->tensors()[id].NumElements();
  if (n != want) {
    return Status::SizeMismatch(
        fmt::format("tensor '{}' has {} elements, the buffer {}", tensor, want, n));
  }
  if (buffer == nullptr) return Status::InvalidArgument("null buffer");
  return id;
}

}  // namespace

Ticket Client::Send(Update kind, const std::string& tensor, const float* data, int64_t n,
                    double weight) {
  auto id = Resolve(impl_->map, tensor, n, data);
  if (!id.ok()) return Ticket(Failed(id.status()));
  const std::vector<int32_t>& parts = impl_->map->PartitionsOf(*id);
  // One reply plus one release of the caller's buffer per partition.
  auto op = std::make_shared<Ticket::State>(2 * static_cast<int>(parts.size()));
  std::vector<Outgoing> batch;
  const proto::MsgType type = kind == Update::kPush ? proto::PUSH : proto::INIT;
  const int64_t step = clock();
  int64_t sent_bytes = 0;
  for (int32_t pid : parts) {
    const Partition& p = impl_->map->partitions()[pid];
    Outgoing o;
    o.target = p.server_rank;
    o.op = op;
    o.header.set_type(type);
    o.header.set_partition(pid);
    o.header.set_clock(step);
    o.header.set_dtype(proto::FLOAT32);
    o.header.set_num_elements(p.length);
    o.header.set_weight(weight);
    o.header.set_version(impl_->base_versions[pid].load(std::memory_order_relaxed));
    o.header.set_layer(impl_->map->tensors()[p.tensor_id].layer);
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
          return Ticket(Failed(s));
        }
      }
      o.header.set_codec(enc->wire_name);
      sent_bytes += static_cast<int64_t>(bytes.size());
      o.payload.push_back(OwnedFrame(std::move(bytes)));
      op->Complete(Status());
    } else {
      const size_t bytes = static_cast<size_t>(p.length) * sizeof(float);
      o.payload.emplace_back(const_cast<float*>(data + p.offset), bytes, ReleaseCallerBuffer,
                             new OpPtr(op));
      sent_bytes += static_cast<int64_t>(bytes);
    }
    batch.push_back(std::move(o));
  }
  impl_->report.OnPushed(sent_bytes, n * static_cast<int64_t>(sizeof(float)));
  impl_->Submit(std::move(batch));
  return Ticket(op);
}

Ticket Client::Push(const std::string& tensor, const float* grad, int64_t n, double weight) {
  return Send(Update::kPush, tensor, grad, n, weight);
}

Ticket Client::Init(const std::string& tensor, const float* values, int64_t n) {
  return Send(Update::kInit, tensor, values, n, 0.0);
}

Ticket Client::Pull(const std::string& tensor, float* out, int64_t n) {
  auto id = Resolve(impl_->map, tensor, n, out);
  if (!id.ok()) return Ticket(Failed(id.status()));
  const std::vector<int32_t>& parts = impl_->map->PartitionsOf(*id);
  auto op = std::make_shared<Ticket::State>(static_cast<int>(parts.size()));
  std::vector<Outgoing> batch;
  for (int32_t pid : parts) {
    const Partition& p = impl_->map->partitions()[pid];
    Outgoing o;
    o.target = p.server_rank;
    o.op = op;
    o.header.set_type(proto::PULL);
    o.header.set_partition(pid);
    o.header.set_codec(impl_->pull_codec);
    o.header.set_clock(clock());
    o.header.set_dtype(proto::FLOAT32);
    o.dst = out + p.offset;
    o.dst_len = p.length;
    batch.push_back(std::move(o));
  }
  impl_->Submit(std::move(batch));
  return Ticket(op);
}

void Client::BeginIteration() { impl_->report.BeginIteration(); }

void Client::ReportMetrics(const std::map<std::string, double>& metrics) {
  impl_->report.AddMetrics(clock(), metrics);
}

Status Client::Clock() {
  const auto entered = impl_->report.EnterClock();
  Status s = ClockAllServers();
  impl_->report.LeaveClock(entered);
  return s;
}

Status Client::ClockAllServers() {
  const int servers = num_servers();
  auto op = std::make_shared<Ticket::State>(servers);
  std::vector<Outgoing> batch;
  for (int rank = 0; rank < servers; ++rank) {
    Outgoing o;
    o.target = rank;
    o.op = op;
    o.header.set_type(proto::CLOCK);
    o.header.set_clock(clock());
    batch.push_back(std::move(o));
  }
  impl_->Submit(std::move(batch));
  Status s = Ticket(op).Wait();
  // Usually the next clock; a controller may move a late worker up to the open round (backup).
  if (s.ok()) impl_->clock = std::max(clock() + 1, op->max_clock);
  return s;
}

Status Client::Barrier() {
  proto::Header h;
  h.set_type(proto::BARRIER);
  h.set_clock(clock());
  return impl_->Call(std::move(h)).status();
}

Status Client::Finish() {
  if (impl_->finished.exchange(true)) return Status();
  proto::Header h;
  h.set_type(proto::LEAVE);
  Status s = impl_->Call(std::move(h), kStopGraceMs).status();
  impl_->StopIoThread();
  return s.code() == proto::ABORTED ? Status() : s;  // a cluster already shut down is fine
}

}  // namespace hetps
