#include "server/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/cluster_view.h"
#include "common/compress/codec.h"
#include "common/logging.h"
#include "common/message.h"
#include "common/scheduler_link.h"
#include "common/shard_map.h"
#include "server/consistency/controller.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

constexpr char kReplyEndpoint[] = "inproc://server-replies";

std::string WorkEndpoint(int thread) { return fmt::format("inproc://server-work-{}", thread); }

// What the apply threads share, read-only after the shard map is installed.
struct Shared {
  int32_t self = -1;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<PartitionStore> store;
  const ShardMap* map = nullptr;
  compress::CodecCache* codecs = nullptr;  // decodes compressed pushes, encodes pulls
  // Partition ids each owner serves: owned[0] the network thread, owned[1 + k] apply thread k.
  std::vector<std::vector<int32_t>> owned;
  // Per layer, counted by whichever thread applies a push; read for the scheduler's report.
  struct LayerCounters {
    std::atomic<int64_t> pushes{0}, bytes{0}, staleness_sum{0}, max_staleness{0};
  };
  std::map<int32_t, std::unique_ptr<LayerCounters>> layers;  // keys fixed with the shard map
};

void CountPush(const Shared& shared, const Partition& p, size_t bytes, int64_t staleness) {
  auto it = shared.layers.find(shared.map->tensors()[p.tensor_id].layer);
  if (it == shared.layers.end()) return;
  Shared::LayerCounters& c = *it->second;
  c.pushes.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  c.staleness_sum.fetch_add(staleness, std::memory_order_relaxed);
  int64_t seen = c.max_staleness.load(std::memory_order_relaxed);
  while (staleness > seen && !c.max_staleness.compare_exchange_weak(seen, staleness)) {
  }
}

RoundSpec RoundFromHeader(const proto::Header& h) {
  RoundSpec r;
  r.clock = h.clock();
  r.workers.assign(h.workers().begin(), h.workers().end());
  r.only_clock = h.only_clock();
  r.one_step = h.one_step();
  r.combine = static_cast<RoundSpec::Combine>(h.combine());
  r.staleness_exponent = h.staleness_exponent();
  return r;
}

proto::Header RoundHeader(const RoundSpec& r) {
  proto::Header h;
  h.set_type(proto::ROUND_COMPLETE);
  h.set_clock(r.clock);
  for (int32_t w : r.workers) h.add_workers(w);
  h.set_only_clock(r.only_clock);
  h.set_one_step(r.one_step);
  h.set_combine(static_cast<int32_t>(r.combine));
  h.set_staleness_exponent(r.staleness_exponent);
  return h;
}

// Applies a closed round on the partitions `owner` serves; the flush round of a policy switch
// (everyone, every clock) also applies every partially filled window.
void CompleteRound(const Shared& shared, int owner, const RoundSpec& round) {
  const bool flush = round.clock == kUnbounded && round.workers.empty();
  for (int32_t id : shared.owned[owner]) {
    PartitionState* part = shared.store->Find(id);
    part->ApplyRound(*shared.optimizer, round);
    if (flush) part->aggregator()->Flush(*part);
  }
}

// Sends [identity, header, payload...] to the router thread, which forwards it to the peer.
void SendReply(zmq::socket_t& out, const std::string& identity, const proto::Header& header,
               std::vector<zmq::message_t> payload = {}) {
  (void)out.send(zmq::buffer(identity), zmq::send_flags::sndmore);
  Send(out, header, std::move(payload));
}

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

struct DataReply {
  proto::Header header;
  std::vector<zmq::message_t> payload;
};

// A pull, answered zero-copy: the reply holds a snapshot of the values until ZeroMQ sent it.
// Pulls may ask for these codecs (deterministic and stateless).
bool PullCodecAllowed(const std::string& codec) { return codec == "none" || codec == "fp16"; }

DataReply ServePull(const Shared& shared, const proto::Header& h, PartitionState& part) {
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
  r.header.set_min_clock(h.min_clock());
  r.payload.push_back(std::move(values));
  part.aggregator()->OnPull(part, h.sender());
  return r;
}

// A push (held for its round, or handed to the aggregator) or an init, after validation.
DataReply ServeUpdate(const Shared& shared, Message& m, PartitionState& part, const float* data) {
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
  if (h.hold()) {
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
    info.window = h.window();
    part.aggregator()->OnPush(part, info, data);
  }
  r.header = ReplyTo(h, proto::PUSH_REPLY, shared.self);
  r.header.set_version(part.version());
  r.header.set_staleness(staleness);
  return r;
}

// Serves one PUSH / PULL / INIT. Runs on the partition's owning thread only, so the partition
// needs no lock. REQUIRES: the router checked that the partition is held here.
DataReply ServeData(const Shared& shared, Message& m, std::vector<float>& scratch) {
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
  if (h.type() == proto::PULL) return ServePull(shared, h, *part);
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
    return counted(ServeUpdate(shared, m, *part, FloatsOf(m.payload[0], scratch)));
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
  return counted(ServeUpdate(shared, m, *part, scratch.data()));
}

// One apply thread: owns the large partitions with id % threads == index.
void ApplyLoop(zmq::context_t& ctx, int index, const Shared& shared) {
  zmq::socket_t in(ctx, zmq::socket_type::pull);
  in.connect(WorkEndpoint(index));
  zmq::socket_t out(ctx, zmq::socket_type::push);
  out.connect(kReplyEndpoint);
  std::vector<float> scratch;
  while (true) {
    auto env = Receive(in, zmq::recv_flags::none, /*routed=*/true);
    if (!env || env->identity.empty()) return;  // the router's stop signal
    if (env->message.header.type() == proto::ROUND_COMPLETE) {
      CompleteRound(shared, 1 + index, RoundFromHeader(env->message.header));
      continue;
    }
    DataReply r = ServeData(shared, env->message, scratch);
    SendReply(out, env->identity, r.header, std::move(r.payload));
  }
}

// The router thread's state and handlers.
class Router {
 public:
  Router(const ServerOptions& options, const std::atomic<bool>& stop)
      : options_(options), stop_(stop) {}

  Status Run();

 private:
  Status Setup();
  void HandleWorker(Envelope& env);
  void HandleControl(Envelope& env);
  Status InstallShardMap(const proto::ShardMap& proto_map);
  Status CheckSender(const Envelope& env) const;
  // Consistency: gates, parked requests, rounds.
  void OnClock(Envelope& env);
  void Dispatch(Envelope& env);  // to the partition's owner
  void Release();                // answers parked clocks and reads that may go on now
  void CompleteRounds();         // synchronous controllers: apply finished clocks' updates
  void BroadcastRound(const RoundSpec& round);
  void RemoveWorker(int32_t w, const char* why);
  Status SwitchPolicy(const proto::Policy& policy);
  int Owner(const Partition& p) const {
    return p.length * static_cast<int64_t>(sizeof(float)) <= options_.inline_apply_bytes
               ? 0
               : 1 + p.id % options_.threads;
  }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Reply(const std::string& identity, const proto::Header& header) {
    SendRouted(*router_, identity, header);
  }
  void StopApplyThreads();
  void FillReport(proto::Header& h) const;

  const ServerOptions& options_;
  const std::atomic<bool>& stop_;
  zmq::context_t ctx_{1};
  std::optional<zmq::socket_t> router_, replies_;
  std::vector<zmq::socket_t> work_;
  std::vector<std::thread> apply_threads_;
  std::unique_ptr<SchedulerLink> link_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<AlgorithmSpec> aggregator_;
  std::optional<Initializer> initializer_;
  std::optional<ShardMap> map_;
  compress::CodecCache codecs_;
  Shared shared_;
  std::vector<float> scratch_;
  std::unordered_set<int32_t> dead_;
  std::optional<AlgorithmSpec> consistency_;
  std::unique_ptr<ConsistencyController> controller_;
  std::deque<Envelope> parked_clocks_, parked_reads_;
  int64_t dropped_ = 0;  // pushes too late for their round (backup)
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t pushes_ = 0, pulls_ = 0, errors_ = 0;
  bool shutdown_ = false;
};

Status Router::Setup() {
  if (Status s = ValidateServerOptions(options_); !s.ok()) return s;
  auto opt = MakeOptimizer(options_.optimizer);
  if (!opt.ok()) return opt.status();
  optimizer_ = std::move(*opt);
  auto init = Initializer::Make(options_.init);
  if (!init.ok()) return init.status();
  initializer_ = std::move(*init);
  auto consistency = Controllers().Parse(options_.consistency);
  if (!consistency.ok()) return consistency.status();
  auto aggregator = Aggregators().Parse(options_.aggregator);
  if (!aggregator.ok()) return aggregator.status();
  if (Status s = CheckCombination(*aggregator, *consistency); !s.ok()) return s;
  consistency_ = std::move(*consistency);
  aggregator_ = std::move(*aggregator);

  router_.emplace(ctx_, zmq::socket_type::router);
  router_->set(zmq::sockopt::linger, 0);
  router_->set(zmq::sockopt::rcvhwm, 0);  // never drop a push under load
  router_->set(zmq::sockopt::sndhwm, 0);
  try {
    router_->bind(options_.bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", options_.bind, e.what()));
  }
  std::string endpoint = BoundEndpoint(*router_);
  std::string address = options_.advertise.empty() ? endpoint : options_.advertise;
  if (address.find("0.0.0.0") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "bound to {}: pass --advertise=tcp://<reachable host>:<port> for workers to dial",
        endpoint));
  }
  replies_.emplace(ctx_, zmq::socket_type::pull);
  replies_->bind(kReplyEndpoint);
  for (int i = 0; i < options_.threads; ++i) {
    work_.emplace_back(ctx_, zmq::socket_type::push);
    work_.back().set(zmq::sockopt::sndhwm, 0);
    work_.back().bind(WorkEndpoint(i));
  }
  link_ = std::make_unique<SchedulerLink>(ctx_, options_.scheduler, proto::SERVER, address,
                                          options_.heartbeat_interval_ms);
  link_->registration().mutable_policy()->set_consistency(consistency_->Full());
  spdlog::info("listening on {} (advertised {}), {} apply threads, optimizer {}", endpoint, address,
               options_.threads, Optimizers().Parse(options_.optimizer)->Full());
  return Status();
}

Status Router::Run() {
  if (Status s = Setup(); !s.ok()) return s;
  if (Status s = link_->Join(stop_, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("server", link_->id());
  link_->SetReporter([this](proto::Header& h) { FillReport(h); });
  shared_.self = link_->id();
  std::vector<int32_t> workers;
  for (const proto::NodeInfo& w : link_->view().workers()) workers.push_back(w.id());
  controller_ = MakeController(*consistency_, workers);
  spdlog::info("consistency {}, aggregator {}", consistency_->Full(), aggregator_->Full());
  spdlog::info("joined: {} servers, {} workers", link_->view().num_servers(),
               link_->view().num_workers());

  zmq::pollitem_t items[] = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                             {replies_->handle(), 0, ZMQ_POLLIN, 0},
                             {link_->socket().handle(), 0, ZMQ_POLLIN, 0}};
  while (!shutdown_ && !stop_.load()) {
    zmq::poll(items, 3, std::chrono::milliseconds(100));
    link_->MaybeHeartbeat();
    if (controller_ && map_) {  // deadlines (semi_async rounds)
      controller_->Tick(Now());
      CompleteRounds();
      Release();
    }
    // Replies first: they free memory and unblock workers.
    for (int n = 0; n < 1024 && (items[1].revents & ZMQ_POLLIN); ++n) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(*replies_, std::back_inserter(frames), zmq::recv_flags::dontwait))
        break;
      zmq::send_multipart(*router_, frames);
    }
    for (int n = 0; n < 1024 && (items[0].revents & ZMQ_POLLIN); ++n) {
      auto env = Receive(*router_, zmq::recv_flags::dontwait, /*routed=*/true);
      if (!env) break;
      HandleWorker(*env);
    }
    while (items[2].revents & ZMQ_POLLIN) {
      auto env = Receive(link_->socket(), zmq::recv_flags::dontwait, /*routed=*/false);
      if (!env) break;
      link_->Heard();
      if (env->status.ok()) HandleControl(*env);
    }
    if (link_->SchedulerLost()) {
      StopApplyThreads();
      return Status::Unavailable(fmt::format("no word from the scheduler for {} ms; stopping",
                                             link_->view().proto().heartbeat_timeout_ms()));
    }
  }
  StopApplyThreads();
  spdlog::info("stopped: {} pushes, {} pulls served, {} requests rejected, {} late pushes dropped",
               pushes_, pulls_, errors_, dropped_);
  return Status();
}

void Router::FillReport(proto::Header& h) const {
  proto::ServerReport& r = *h.mutable_server_report();
  r.set_pushes(pushes_);
  r.set_pulls(pulls_);
  r.set_errors(errors_);
  r.set_parked_pulls(static_cast<int64_t>(parked_reads_.size()));
  r.set_parked_clocks(static_cast<int64_t>(parked_clocks_.size()));
  r.set_consistency(consistency_->Full());
  if (!map_) return;
  r.set_partitions(shared_.store->num_partitions());
  r.set_bytes_held(shared_.store->bytes());
  for (const auto& [layer, c] : shared_.layers) {
    proto::LayerReport& l = *r.add_layers();
    l.set_layer(layer);
    l.set_pushes(c->pushes.load(std::memory_order_relaxed));
    l.set_bytes(c->bytes.load(std::memory_order_relaxed));
    l.set_staleness_sum(c->staleness_sum.load(std::memory_order_relaxed));
    l.set_max_staleness(c->max_staleness.load(std::memory_order_relaxed));
  }
}

void Router::StopApplyThreads() {
  for (auto& w : work_) {
    (void)w.send(zmq::message_t(), zmq::send_flags::none);  // empty identity = stop
  }
  for (auto& t : apply_threads_) t.join();
  apply_threads_.clear();
}

Status Router::CheckSender(const Envelope& env) const {
  const int32_t sender = env.message.header.sender();
  const proto::NodeInfo* node = link_->view().Node(sender);
  if (node == nullptr || node->role() != proto::WORKER || env.identity != NodeIdentity(sender)) {
    return Status::Unregistered(
        fmt::format("node {} is not a registered worker of this cluster", sender));
  }
  if (dead_.contains(sender)) {
    return Status::Unregistered(fmt::format("node {} was declared dead", sender));
  }
  return Status();
}

void Router::HandleWorker(Envelope& env) {
  proto::Header& h = env.message.header;
  Status s = env.status;
  if (s.ok()) s = CheckSender(env);
  if (s.ok() && !map_) s = Status::Unavailable("no shard map installed yet");
  if (s.ok() && h.type() == proto::CLOCK) return OnClock(env);
  if (s.ok() && h.type() != proto::PUSH && h.type() != proto::PULL && h.type() != proto::INIT) {
    s = Status::InvalidArgument(
        fmt::format("a server does not take {} messages", proto::MsgType_Name(h.type())));
  }
  if (s.ok() && shared_.store->Find(h.partition()) == nullptr) {
    const int32_t id = h.partition();
    s = id < 0 || static_cast<size_t>(id) >= map_->partitions().size()
            ? Status::NotFound(fmt::format("no partition {}", id))
            : Status::NotFound(fmt::format("partition {} lives on server rank {}", id,
                                           map_->partitions()[id].server_rank));
  }
  if (!s.ok()) {
    ++errors_;
    spdlog::warn("rejected request from {}: {}", h.sender(), s.ToString());
    Reply(env.identity, ErrorReply(h, s, link_->id()));
    return;
  }
  (h.type() == proto::PULL ? pulls_ : pushes_)++;
  if (h.type() == proto::PULL && !controller_->ReadReady(h.sender(), h.clock())) {
    parked_reads_.push_back(std::move(env));  // answered by Release() once the slowest catch up
    return;
  }
  if (h.type() == proto::PUSH && !controller_->Accepts(h.clock())) {
    ++dropped_;  // its round closed without it
    proto::Header r = ReplyTo(h, proto::PUSH_REPLY, link_->id());
    r.set_dropped(true);
    Reply(env.identity, r);
    return;
  }
  if (h.type() == proto::PUSH) {
    h.set_hold(controller_->synchronous());
    h.set_window(controller_->window());
  }
  Dispatch(env);
}

void Router::Dispatch(Envelope& env) {
  proto::Header& h = env.message.header;
  const int64_t slowest = controller_->clocks().min();
  h.set_min_clock(slowest == kUnbounded ? h.clock() : slowest);
  const int owner = Owner(map_->partitions()[h.partition()]);
  if (owner == 0) {
    // Small partitions belong to this thread: a hand-over would cost more than the work.
    DataReply r = ServeData(shared_, env.message, scratch_);
    SendRouted(*router_, env.identity, r.header, std::move(r.payload));
    return;
  }
  // Large ones go to their apply thread; payload frames move without a copy.
  zmq::socket_t& work = work_[owner - 1];
  (void)work.send(zmq::buffer(env.identity), zmq::send_flags::sndmore);
  Send(work, h, std::move(env.message.payload));
}

void Router::OnClock(Envelope& env) {
  const proto::Header& h = env.message.header;
  controller_->OnClock(h.sender(), h.clock(), Now());
  CompleteRounds();
  parked_clocks_.push_back(std::move(env));  // the reply waits for the gate
  Release();
}

void Router::Release() {
  const double now = Now();
  for (auto it = parked_clocks_.begin(); it != parked_clocks_.end();) {
    const proto::Header& h = it->message.header;
    if (!controller_->TryStart(h.sender(), h.clock() + 1, now)) {
      ++it;
      continue;
    }
    proto::Header r = ReplyTo(h, proto::CLOCK_REPLY, link_->id());
    r.set_clock(controller_->ContinueAt(h.sender(), h.clock()));
    const int64_t slowest = controller_->clocks().min();
    r.set_min_clock(slowest == kUnbounded ? h.clock() + 1 : slowest);
    Reply(it->identity, r);
    it = parked_clocks_.erase(it);
  }
  for (auto it = parked_reads_.begin(); it != parked_reads_.end();) {
    if (!controller_->ReadReady(it->message.header.sender(), it->message.header.clock())) {
      ++it;
      continue;
    }
    Dispatch(*it);
    it = parked_reads_.erase(it);
  }
}

void Router::CompleteRounds() {
  for (RoundSpec round : controller_->TakeRounds()) {
    BroadcastRound(round);
  }
}

// Every owner applies the round; FIFO hand-over puts this after every push that arrived
// before it and before every read released after it.
void Router::BroadcastRound(const RoundSpec& round) {
  const proto::Header h = RoundHeader(round);
  for (auto& work : work_) {
    (void)work.send(zmq::buffer(std::string("round")), zmq::send_flags::sndmore);
    Send(work, h);
  }
  CompleteRound(shared_, 0, round);
}

void Router::RemoveWorker(int32_t w, const char* why) {
  if (!controller_) return;
  controller_->RemoveWorker(w);
  spdlog::info("worker {} {}; it no longer holds back any clock", w, why);
  CompleteRounds();
  Release();
}

Status Router::SwitchPolicy(const proto::Policy& policy) {
  auto spec = Controllers().Parse(policy.consistency());
  if (!spec.ok()) return spec.status();
  if (Status s = CheckCombination(*aggregator_, *spec); !s.ok()) return s;
  std::vector<int32_t> workers;
  for (const auto& [w, c] : controller_->clocks().all()) workers.push_back(w);
  std::unique_ptr<ConsistencyController> next = MakeController(*spec, workers);
  next->AdoptClocks(controller_->clocks());
  if (controller_->synchronous() || controller_->window() > 0) {
    RoundSpec flush;  // nothing held is lost: apply it all now
    flush.clock = kUnbounded;
    BroadcastRound(flush);
  }
  spdlog::info("consistency {} -> {} at clocks {}..{}", consistency_->Full(), spec->Full(),
               controller_->clocks().min(), controller_->clocks().max());
  controller_ = std::move(next);
  consistency_ = std::move(*spec);
  Release();
  return Status();
}

Status Router::InstallShardMap(const proto::ShardMap& proto_map) {
  if (map_) return Status::FailedPrecondition("a shard map is already installed");
  auto map = ShardMap::FromProto(proto_map);
  if (!map.ok()) return map.status();
  map_ = std::move(*map);
  shared_.optimizer = std::move(optimizer_);
  shared_.map = &*map_;
  shared_.codecs = &codecs_;
  shared_.store = std::make_unique<PartitionStore>(*map_, link_->rank(), *shared_.optimizer,
                                                   *initializer_, &*aggregator_);
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank != link_->rank()) continue;
    auto& slot = shared_.layers[map_->tensors()[p.tensor_id].layer];
    if (!slot) slot = std::make_unique<Shared::LayerCounters>();
  }
  shared_.owned.assign(1 + options_.threads, {});
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank == link_->rank()) shared_.owned[Owner(p)].push_back(p.id);
  }
  for (int i = 0; i < options_.threads; ++i) {
    apply_threads_.emplace_back(ApplyLoop, std::ref(ctx_), i, std::cref(shared_));
  }
  spdlog::info("holding {} partitions, {:.1f} MiB ({} tensors in the map)",
               shared_.store->num_partitions(), shared_.store->bytes() / 1048576.0,
               map_->tensors().size());
  return Status();
}

void Router::HandleControl(Envelope& env) {
  const proto::Header& h = env.message.header;
  switch (h.type()) {
    case proto::SHARD_MAP: {
      Status s = InstallShardMap(h.shard_map());
      proto::Header ack =
          s.ok() ? ReplyTo(h, proto::SHARD_MAP_ACK, link_->id()) : ErrorReply(h, s, link_->id());
      if (!s.ok()) spdlog::error("shard map rejected: {}", s.ToString());
      link_->Send(ack);
      break;
    }
    case proto::NODE_DEAD:
      dead_.insert(h.node());
      spdlog::warn("node {} declared dead by the scheduler", h.node());
      RemoveWorker(h.node(), "is dead");
      break;
    case proto::NODE_LEFT:
      RemoveWorker(h.node(), "finished");
      break;
    case proto::SET_POLICY: {
      Status s = SwitchPolicy(h.policy());
      if (!s.ok()) spdlog::warn("consistency '{}' refused: {}", h.policy().consistency(), s.ToString());
      link_->Send(s.ok() ? ReplyTo(h, proto::POLICY_ACK, link_->id())
                         : ErrorReply(h, s, link_->id()));
      break;
    }
    case proto::POLICY_HINT:
      if (controller_) {
        controller_->OnHint({h.stragglers().begin(), h.stragglers().end()}, h.quorum());
        if (map_) {
          CompleteRounds();
          Release();
        }
      }
      break;
    case proto::SHUTDOWN:
      spdlog::info("shutdown requested by the scheduler");
      shutdown_ = true;
      break;
    case proto::HEARTBEAT:
      break;
    default:
      spdlog::debug("ignoring control message {}", proto::MsgType_Name(h.type()));
  }
}

}  // namespace

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.threads < 1 || o.threads > 64) {
    return Status::InvalidArgument(fmt::format("threads must be in [1, 64], got {}", o.threads));
  }
  if (auto opt = Optimizers().Parse(o.optimizer); !opt.ok()) return opt.status();
  if (auto init = Initializer::Make(o.init); !init.ok()) return init.status();
  auto consistency = Controllers().Parse(o.consistency);
  if (!consistency.ok()) return consistency.status();
  auto aggregator = Aggregators().Parse(o.aggregator);
  if (!aggregator.ok()) return aggregator.status();
  return CheckCombination(*aggregator, *consistency);
}

ServerNode::ServerNode(ServerOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

Status ServerNode::Run() {
  Router router(options_, stop_);
  return router.Run();
}

}  // namespace hetps
