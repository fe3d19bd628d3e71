#include "server/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/batch.h"
#include "common/cluster_view.h"
#include "common/compress/codec.h"
#include "common/connection_guard.h"
#include "common/cut.h"
#include "common/logging.h"
#include "common/message.h"
#include "common/same_message.h"
#include "common/scheduler_link.h"
#include "common/shard_map.h"
#include "common/shm_segment.h"
#include "server/apply_threads.h"
#include "server/cma_peers.h"
#include "server/consistency_gate.h"
#include "server/cut_file.h"
#include "server/durable_store.h"
#include "server/fault_point.h"
#include "server/serving.h"

namespace hetps {
namespace {

// Answers of one batch go back together up to this many payload bytes per message (a pull of a
// larger partition goes alone).
constexpr int64_t kAnswerBatchBytes = int64_t{256} << 10;

// The network thread: owns the sockets to the workers and the scheduler, validates every
// request, and serves the small partitions itself; the consistency gate decides when, the
// apply threads own the large partitions.
class ServerLoop {
 public:
  ServerLoop(const ServerOptions& options, const std::atomic<bool>& stop)
      : options_(options), stop_(stop) {}

  Status Run();

 private:
  Status Setup();
  void Poll();  // one turn: replies from the apply threads, requests, control messages
  void HandleWorker(Envelope& env);
  void HandleControl(Envelope& env);
  void OnWorkerJoined(const proto::Header& h);
  Status InstallShardMap(const proto::ShardMap& proto_map);
  Status OpenDataDir();
  Status RestoreShards();
  Status RestoreCut();
  void MaybeCheckpoint();
  // Whole-run checkpoints: the scheduler's request, and on every turn, writing the cut once
  // every live worker reached its clock and answering once every owner wrote its part.
  void OnCheckpoint(const proto::Header& h);
  void ProgressCut();
  void ReleaseDeferred(std::deque<Envelope> deferred);
  Status CheckSender(const Envelope& env) const;
  void Reject(const Envelope& env, const Status& s);
  Status CheckRequest(const Envelope& env) const;
  // The co-located transport (worker/shm_channel.h): a worker's SHM_ATTACH maps its segment;
  // a data request with shm_length gets the slot it names, checked to lie within the segment,
  // as its payload frame (which keeps the mapping alive while anything holds it).
  void AttachShm(Envelope& env);
  Status BorrowShm(Envelope& env);
  // The cross memory attach transport (server/cma_peers.h): CMA_ATTACH probes the worker's
  // memory, CMA_REVOKE ends it; a data request with cma_length is checked to come from an
  // attached worker, and its apply thread makes the copy.
  void AttachCma(Envelope& env);
  void RevokeCma(Envelope& env);
  void Serve(DataRequest&& request);  // on the partition's owning thread
  void ApplyRound(const RoundSpec& round);
  int Owner(const Partition& p) const {
    return p.length * static_cast<int64_t>(sizeof(float)) <= options_.inline_apply_bytes
               ? 0
               : 1 + p.id % options_.threads;
  }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Reply(const std::string& identity, proto::Header header) {
    header.set_sender(link_->id());
    Answer(identity, std::move(header), std::vector<zmq::message_t>{});
  }
  // Batches (common/batch.h): the parts of a worker's batch go through HandleWorker one by one;
  // what they are answered at once goes back to it as one batch (SendAnswers after the last).
  void HandleBatch(Envelope& env);
  void Answer(const std::string& identity, proto::Header&& header,
              std::vector<zmq::message_t>&& payload);
  void SendAnswers();
  void FillReport(proto::Header& h) const;

  const ServerOptions& options_;
  const std::atomic<bool>& stop_;
  zmq::context_t ctx_{1};
  // The scheduler link has its own I/O thread: heartbeats must not queue behind a GiB of pushes
  // arriving on the data plane (the scheduler would declare a busy server dead).
  zmq::context_t control_ctx_{1};
  std::optional<zmq::socket_t> router_;
  std::optional<ZapHandler> zap_;         // auth.curve: admits worker keys to router_
  std::optional<ConnectionGuard> guard_;  // before router_ goes
  std::optional<ApplyThreads> apply_threads_;
  std::unique_ptr<SchedulerLink> link_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<AlgorithmSpec> aggregator_;
  std::optional<Initializer> initializer_;
  std::optional<ShardMap> map_;
  compress::CodecCache codecs_;
  ServingState state_;
  std::vector<float> scratch_;
  std::unordered_set<int32_t> dead_;
  std::unordered_map<int32_t, std::shared_ptr<ShmSegment>> shm_;  // by worker node id
  CmaPeers cma_;
  std::optional<ConsistencyGate> gate_;
  std::unique_ptr<DurableStore> durable_;
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  Status fatal_;  // set when the server cannot go on (its data dir does not fit the cluster)
  std::optional<proto::CutManifest> restore_;  // --restore_from's manifest
  // A whole-run checkpoint at cut.clock: requests of that clock or later wait in `deferred`
  // (in arrival order) until every owner has its part in hand (the network thread's written,
  // the apply threads' queued ahead of them), so it holds every update of the clocks before and
  // none after.
  struct PendingCut {
    uint64_t request_id = 0;
    proto::Cut cut;
    std::deque<Envelope> deferred;
    std::shared_ptr<CutJob> job;  // writing, once every live worker reached cut.clock
    std::chrono::steady_clock::time_point writing_since;
  };
  std::optional<PendingCut> cut_;
  // While a batch is served: its worker and the answers collected for it.
  struct Answers {
    std::string identity;
    Batch batch;
  };
  std::optional<Answers> answers_;
  int64_t max_clock_seen_ = -1;  // the furthest clock of any request served
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t pushes_ = 0, pulls_ = 0, errors_ = 0;
  std::unordered_map<std::string, int> errors_to_strangers_;  // by identity, see Reject
  bool shutdown_ = false;
};

Status ServerLoop::Setup() {
  if (Status s = ValidateServerOptions(options_); !s.ok()) return s;
  auto opt = MakeOptimizer(options_.optimizer);
  if (!opt.ok()) return opt.status();
  optimizer_ = std::move(*opt);
  auto init = Initializer::Make(options_.init);
  if (!init.ok()) return init.status();
  initializer_ = std::move(*init);
  aggregator_ = *Aggregators().Parse(options_.aggregator);  // validated above
  gate_.emplace(
      *Controllers().Parse(options_.consistency), *aggregator_,
      ConsistencyGate::Actions{
          [this](const std::string& identity, const proto::Header& h) { Reply(identity, h); },
          [this](DataRequest&& request) { Serve(std::move(request)); },
          [this](const RoundSpec& round) { ApplyRound(round); }, [this] { return Now(); }});

  router_.emplace(ctx_, zmq::socket_type::router);
  router_->set(zmq::sockopt::linger, 0);
  // At most 64 messages from one peer wait to be read: beyond, ZeroMQ stops reading that
  // connection (TCP pushes back on the sender; nothing is dropped), so a peer that sends
  // faster than the server reads cannot fill its memory with queued frames.
  router_->set(zmq::sockopt::rcvhwm, 64);
  router_->set(zmq::sockopt::sndhwm, 0);
  router_->set(zmq::sockopt::maxmsgsize, MaxFrameBytes(options_.max_partition_bytes));
  guard_.emplace(*router_, options_.max_connections_per_address, "server");
  if (Status s = CheckListenEndpoint(options_.bind, options_.auth, options_.insecure); !s.ok()) {
    return s;
  }
  if (options_.auth.curve) {
    zap_.emplace(ctx_, options_.auth.allow,
                 std::map<std::string, std::set<KeyRole>>{{"server", {KeyRole::kWorker}}});
    options_.auth.SecureServer(*router_, "server");
  }
  try {
    router_->bind(options_.bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", options_.bind, e.what()));
  }
  std::string endpoint = BoundEndpoint(*router_);
  std::string address = options_.advertise.empty() ? endpoint : options_.advertise;
  if (address.ends_with(":*")) {  // the host to dial, at the port bound
    address.replace(address.size() - 1, 1, endpoint.substr(endpoint.rfind(':') + 1));
  }
  if (address.find("0.0.0.0") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "bound to {}: pass --advertise=tcp://<reachable host>:<port> for workers to dial",
        endpoint));
  }
  apply_threads_.emplace(ctx_, options_.threads);
  link_ = std::make_unique<SchedulerLink>(control_ctx_, options_.scheduler, proto::SERVER, address,
                                          options_.heartbeat_interval_ms, options_.auth);
  link_->registration().mutable_policy()->set_consistency(gate_->consistency());
  link_->registration().mutable_policy()->set_scheduler_rounds(gate_->scheduler_rounds());
  if (Status s = OpenDataDir(); !s.ok()) return s;
  spdlog::info("listening on {} (advertised {}; {}), {} apply threads, optimizer {} ({})", endpoint,
               address, options_.auth.Describe(), options_.threads,
               Optimizers().Parse(options_.optimizer)->Full(), SimdPathName(ActiveSimdPath()));
  return Status();
}

Status ServerLoop::Run() {
  if (Status s = Setup(); !s.ok()) return s;
  if (Status s = link_->Join(stop_, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("server", link_->id());
  link_->SetReporter([this](proto::Header& h) { FillReport(h); });
  state_.self = link_->id();
  state_.cma = &cma_;
  std::vector<int32_t> workers;
  for (const proto::NodeInfo& w : link_->view().workers()) workers.push_back(w.id());
  gate_->Start(workers, restore_ ? restore_->clock() : 0);
  // Restarted on its data dir into a running cluster, it takes the cluster's consistency (an
  // operator may have switched it since this server's flags were written); resumed from a
  // checkpoint, the consistency the run had then.
  const std::string& cluster_policy =
      restore_ ? restore_->policy().consistency() : link_->view().proto().policy().consistency();
  if (((durable_ && durable_->meta()) || restore_) && !cluster_policy.empty() &&
      cluster_policy != gate_->consistency()) {
    if (Status s = gate_->Switch(cluster_policy); !s.ok()) {
      spdlog::warn("the cluster runs consistency '{}', which this server refuses: {}",
                   cluster_policy, s.ToString());
    }
  }
  spdlog::info("consistency {}, aggregator {}", gate_->consistency(), aggregator_->Full());
  const std::string joined =
      fmt::format("joined as server {}: {} servers, {} workers", link_->rank(),
                  link_->view().num_servers(), link_->view().num_workers());
  spdlog::info("{}", joined);
  if (options_.on_joined) options_.on_joined(joined);

  while (!shutdown_ && !stop_.load() && fatal_.ok()) {
    Poll();
    ProgressCut();
    MaybeCheckpoint();
    if (link_->SchedulerLost()) {
      apply_threads_->Stop();
      CheckpointOwned(state_, 0);
      return Status::Unavailable(fmt::format("no word from the scheduler for {} ms; stopping",
                                             link_->view().proto().heartbeat_timeout_ms()));
    }
  }
  apply_threads_->Stop();  // each apply thread checkpoints its partitions as it stops
  if (map_) CheckpointOwned(state_, 0);
  if (!fatal_.ok()) return fatal_;
  spdlog::info("stopped: {} pushes, {} pulls served, {} requests rejected, {} late pushes dropped",
               pushes_, pulls_, errors_, gate_->dropped());
  return Status();
}

void ServerLoop::Poll() {
  zmq::pollitem_t items[] = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                             {apply_threads_->replies().handle(), 0, ZMQ_POLLIN, 0},
                             {link_->socket().handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, 3, std::chrono::milliseconds(100));
  link_->MaybeHeartbeat();
  if (map_) gate_->Tick();  // deadlines (semi_async rounds)
  // Replies first: they free memory and unblock workers.
  for (int n = 0; n < 1024 && (items[1].revents & ZMQ_POLLIN); ++n) {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(apply_threads_->replies(), std::back_inserter(frames),
                             zmq::recv_flags::dontwait))
      break;
    zmq::send_multipart(*router_, frames);
  }
  for (int n = 0; n < 1024 && (items[0].revents & ZMQ_POLLIN); ++n) {
    auto env = Receive(*router_, zmq::recv_flags::dontwait, /*routed=*/true);
    if (!env) break;
    if (IsBatch(*env)) {
      HandleBatch(*env);
    } else {
      HandleWorker(*env);
    }
  }
  while (items[2].revents & ZMQ_POLLIN) {
    auto env = Receive(link_->socket(), zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) break;
    link_->Heard();
    if (env->status.ok()) HandleControl(*env);
  }
}

void ServerLoop::FillReport(proto::Header& h) const {
  proto::ServerReport& r = *h.mutable_server_report();
  r.set_pushes(pushes_);
  r.set_pulls(pulls_);
  r.set_errors(errors_);
  r.set_connections_refused(guard_ ? guard_->refused() : 0);
  r.set_parked_pulls(gate_->parked_reads());
  r.set_parked_clocks(gate_->parked_clocks());
  r.set_consistency(gate_->consistency());
  if (!map_) return;
  r.set_partitions(state_.store->num_partitions());
  r.set_bytes_held(state_.store->bytes());
  for (const auto& [layer, c] : state_.layers) {
    proto::LayerReport& l = *r.add_layers();
    l.set_layer(layer);
    l.set_pushes(c->pushes.load(std::memory_order_relaxed));
    l.set_bytes(c->bytes.load(std::memory_order_relaxed));
    l.set_staleness_sum(c->staleness_sum.load(std::memory_order_relaxed));
    l.set_max_staleness(c->max_staleness.load(std::memory_order_relaxed));
  }
}

Status ServerLoop::CheckSender(const Envelope& env) const {
  // With keys, the connection's key is held to the allow-list as it is now: ZeroMQ checks it
  // only at the handshake, and a key removed since (SIGHUP) is refused from its next message.
  if (options_.auth.curve && options_.auth.RoleOf(env.peer) != KeyRole::kWorker) {
    return Status::PermissionDenied(
        "this connection's key is no longer a worker key of the allow-list");
  }
  const int32_t sender = env.message.header.sender();
  const proto::NodeInfo* node = link_->view().Node(sender);
  if (node == nullptr || node->role() != proto::WORKER || !IsNodeIdentity(env.identity, sender)) {
    return Status::Unregistered(
        fmt::format("node {} is not a registered worker of this cluster", sender));
  }
  if (dead_.contains(sender)) {
    return Status::Unregistered(fmt::format("node {} was declared dead", sender));
  }
  // With keys, the worker's requests come with the key it registered with (the scheduler
  // announces it): another worker's key cannot speak for it.
  if (options_.auth.curve && node->public_key() != env.peer) {
    return Status::PermissionDenied(
        fmt::format("worker {} registered with another key than this connection's", sender));
  }
  return Status();
}

// Everything a request must pass before the gate sees it.
Status ServerLoop::CheckRequest(const Envelope& env) const {
  const proto::Header& h = env.message.header;
  if (!env.status.ok()) return env.status;
  if (Status s = CheckSender(env); !s.ok()) return s;
  if (!map_) return Status::Unavailable("no shard map installed yet");
  if (h.type() == proto::CLOCK) return Status();
  if (h.type() != proto::PUSH && h.type() != proto::PULL && h.type() != proto::INIT) {
    return Status::InvalidArgument(
        fmt::format("a server does not take {} messages", proto::MsgType_Name(h.type())));
  }
  if (state_.store->Find(h.partition()) == nullptr) {
    const int32_t id = h.partition();
    return id < 0 || static_cast<size_t>(id) >= map_->partitions().size()
               ? Status::NotFound(fmt::format("no partition {}", id))
               : Status::NotFound(fmt::format("partition {} lives on server rank {}", id,
                                              map_->partitions()[id].server_rank));
  }
  return Status();
}

// A request that failed its checks. A worker of the cluster always hears why. A peer that is
// none (junk, a stranger, a worker's identity faked on another connection) hears it for its
// first kErrorsToStrangers requests only: a peer that never reads its replies would otherwise
// make the server queue them without bound. Logged for the first 20, then every 1000th.
void ServerLoop::Reject(const Envelope& env, const Status& s) {
  constexpr int kErrorsToStrangers = 64;
  const proto::Header& h = env.message.header;
  ++errors_;
  if (errors_ <= 20 || errors_ % 1000 == 0) {
    spdlog::warn("rejected request from {} ({} rejected so far): {}", h.sender(), errors_,
                 s.ToString());
  }
  bool worker = false;
  for (const proto::NodeInfo& w : link_->view().workers()) {
    worker = worker || (IsNodeIdentity(env.identity, w.id()) && !dead_.contains(w.id()));
  }
  if (!worker) {
    if (errors_to_strangers_.size() >= 4096) errors_to_strangers_.clear();  // bounded
    if (++errors_to_strangers_[env.identity] > kErrorsToStrangers) return;
  }
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

void ServerLoop::HandleWorker(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (env.status.ok() && h.type() == proto::SHM_ATTACH) return AttachShm(env);
  if (env.status.ok() && h.type() == proto::CMA_ATTACH) return AttachCma(env);
  if (env.status.ok() && h.type() == proto::CMA_REVOKE) return RevokeCma(env);
  if (Status s = CheckRequest(env); !s.ok()) return Reject(env, s);
  if (cut_ && !cut_->job && h.clock() >= cut_->cut.clock()) {
    cut_->deferred.push_back(std::move(env));  // after the checkpoint's clock: waits for it
    return;
  }
  max_clock_seen_ = std::max(max_clock_seen_, h.clock());
  if (h.type() == proto::CLOCK) return gate_->OnClock(env);
  if (h.shm_length() != 0) {
    if (Status s = BorrowShm(env); !s.ok()) return Reject(env, s);
  }
  if (h.cma_length() != 0) {
    if (h.cma_length() < 0 || h.shm_length() != 0 || !env.message.payload.empty() ||
        !cma_.Attached(h.sender())) {
      return Reject(env, Status::Malformed(fmt::format(
                             "a cross memory request of {} bytes (with {} frame(s), shm {}) from "
                             "worker {}, which {} attached",
                             h.cma_length(), env.message.payload.size(), h.shm_length(), h.sender(),
                             cma_.Attached(h.sender()) ? "is" : "is not")));
    }
  }
  (h.type() == proto::PULL ? pulls_ : pushes_)++;
  gate_->Admit(env);
}

void ServerLoop::HandleBatch(Envelope& env) {
  std::vector<Envelope> parts;
  if (Status s = Unbatch(env, parts); !s.ok()) return Reject(env, s);
  answers_.emplace(Answers{env.identity, Batch(kAnswerBatchBytes)});
  for (Envelope& part : parts) HandleWorker(part);
  SendAnswers();
  answers_.reset();
}

void ServerLoop::Answer(const std::string& identity, proto::Header&& header,
                        std::vector<zmq::message_t>&& payload) {
  if (answers_ && identity == answers_->identity) {
    int64_t bytes = 0;
    for (const zmq::message_t& m : payload) bytes += static_cast<int64_t>(m.size());
    if (bytes < kAnswerBatchBytes) {
      if (!answers_->batch.Fits(bytes)) SendAnswers();
      answers_->batch.Add(std::move(header), std::move(payload));
      return;
    }
    SendAnswers();  // in order: what was collected goes first
  }
  SendRouted(*router_, identity, header, std::move(payload));
}

void ServerLoop::SendAnswers() {
  if (!answers_) return;
  answers_->batch.Flush(link_->id(), [&](const proto::Header& h, std::vector<zmq::message_t> p) {
    SendRouted(*router_, answers_->identity, h, std::move(p));
  });
}

void ServerLoop::AttachShm(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (Status s = CheckSender(env); !s.ok()) return Reject(env, s);
  Status s;
  if (h.shm_length() <= 0 || h.shm_length() > (int64_t{1} << 32)) {
    s = Status::InvalidArgument(fmt::format("a shared memory segment of {} bytes", h.shm_length()));
  } else {
    auto segment = ShmSegment::Open(h.shm_name(), static_cast<size_t>(h.shm_length()));
    if (segment.ok()) {
      shm_[h.sender()] = std::move(*segment);
      spdlog::debug("worker {}: payloads through shared memory {}", h.sender(), h.shm_name());
      return Reply(env.identity, ReplyTo(h, proto::SHM_ATTACH_REPLY, link_->id()));
    }
    s = segment.status();
  }
  spdlog::info("worker {} stays on TCP: {}", h.sender(), s.ToString());
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

void ServerLoop::AttachCma(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (Status s = CheckSender(env); !s.ok()) return Reject(env, s);
  proto::Header r = ReplyTo(h, proto::CMA_ATTACH_REPLY, link_->id());
  Status s;
  if (h.cma_probe() == 0) {  // the claim: answered with a probe to put there
    auto probe = cma_.Challenge(h.sender(), static_cast<pid_t>(h.cma_pid()), h.pid_namespace(),
                                h.cma_address());
    if (probe.ok()) {
      r.set_cma_probe(*probe);
      return Reply(env.identity, std::move(r));
    }
    s = probe.status();
  } else if (s = cma_.Confirm(h.sender(), h.cma_probe()); s.ok()) {
    spdlog::debug("worker {}: payloads through cross memory attach", h.sender());
    r.set_cma_pid(getpid());
    return Reply(env.identity, std::move(r));
  }
  spdlog::info("worker {} gets no cross memory attach: {}", h.sender(), s.ToString());
  Reply(env.identity, ErrorReply(h, s, link_->id()));
}

// Answered only once no copy of the worker's memory is in progress or can start.
void ServerLoop::RevokeCma(Envelope& env) {
  const proto::Header& h = env.message.header;
  // Whatever the worker's standing (one declared dead or gone was forgotten already, and its
  // client waits for this answer): only its own connection may ask.
  if (!IsNodeIdentity(env.identity, h.sender())) {
    return Reject(env, Status::Unregistered(
                           fmt::format("this connection does not speak for node {}", h.sender())));
  }
  cma_.Revoke(h.sender());
  Reply(env.identity, ReplyTo(h, proto::CMA_REVOKE_REPLY, link_->id()));
}

Status ServerLoop::BorrowShm(Envelope& env) {
  const proto::Header& h = env.message.header;
  auto it = shm_.find(h.sender());
  if (it == shm_.end()) {
    return Status::FailedPrecondition("this worker has no shared memory segment here");
  }
  const int64_t offset = h.shm_offset(), length = h.shm_length();
  const int64_t size = static_cast<int64_t>(it->second->size());
  if (!env.message.payload.empty() || offset < 0 || length <= 0 || offset > size ||
      length > size - offset) {
    return Status::Malformed(fmt::format(
        "shared memory slot [{}, +{}) with {} frame(s) is not within the segment of {} bytes",
        offset, length, env.message.payload.size(), size));
  }
  using Mapping = std::shared_ptr<ShmSegment>;
  env.message.payload.emplace_back(
      it->second->data() + offset, static_cast<size_t>(length),
      [](void*, void* hint) { delete static_cast<Mapping*>(hint); }, new Mapping(it->second));
  return Status();
}

void ServerLoop::Serve(DataRequest&& request) {
  const int owner = Owner(map_->partitions()[request.message.header.partition()]);
  if (owner > 0) return apply_threads_->Hand(owner - 1, std::move(request));
  // Small partitions belong to this thread: a hand-over would cost more than the work.
  ServeData(state_, request, scratch_, [&](DataReply&& r) {
    Answer(request.identity, std::move(r.header), std::move(r.payload));
  });
  FaultPoint("update.replied");
}

// Every owner applies the round; FIFO hand-over puts this after every push that arrived
// before it and before every read released after it.
void ServerLoop::ApplyRound(const RoundSpec& round) {
  if (!map_) return;
  apply_threads_->Broadcast(round);
  CompleteRound(state_, 0, round);
}

// A data dir remembers its rank: the restarted server asks the scheduler for it again.
Status ServerLoop::OpenDataDir() {
  if (!options_.restore_from.empty()) {
    auto manifest = ReadManifest(options_.restore_from);
    if (!manifest.ok()) return manifest.status();
    restore_ = std::move(*manifest);
    spdlog::info("starting from checkpoint {} (clock {})", options_.restore_from,
                 restore_->clock());
  }
  if (options_.data_dir.empty()) return Status();
  auto store = DurableStore::Open(options_.data_dir, *ParseDurability(options_.durability));
  if (!store.ok()) return store.status();
  durable_ = std::move(*store);
  if (durable_->meta() && restore_) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} already holds a model; starting from checkpoint {} needs an empty one",
        durable_->dir(), options_.restore_from));
  }
  if (durable_->meta()) link_->registration().set_rank(durable_->meta()->server_rank());
  spdlog::info("data dir {} ({}), durability {}, checkpoints every {} ms", durable_->dir(),
               durable_->meta() ? fmt::format("server rank {}", durable_->meta()->server_rank())
                                : std::string("new"),
               DurabilityName(durable_->durability()), options_.checkpoint_interval_ms);
  return Status();
}

// Brings every partition back from the data dir, or claims a new one for this cluster.
Status ServerLoop::RestoreShards() {
  if (!durable_) return Status();
  const std::string& dir = durable_->dir();
  if (!durable_->meta()) {
    proto::DurableMeta meta;
    meta.set_server_rank(link_->rank());
    *meta.mutable_shard_map() = ToProto(*map_);
    return durable_->SetMeta(meta);
  }
  const proto::DurableMeta& meta = *durable_->meta();
  if (meta.server_rank() != link_->rank()) {
    return Status::FailedPrecondition(
        fmt::format("data dir {} belongs to server rank {}, but this server joined as rank {}", dir,
                    meta.server_rank(), link_->rank()));
  }
  if (!SameMessage(meta.shard_map(), ToProto(*map_))) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} holds another model ({} tensors, {} partitions; the cluster declared {} "
        "and {}); start this server on an empty data dir, or declare the same tensors",
        dir, meta.shard_map().tensors_size(), meta.shard_map().partitions_size(),
        map_->tensors().size(), map_->partitions().size()));
  }
  // Each owner's partitions are restored on a thread of their own (as they are served: one
  // thread per partition, owners side by side), while this thread keeps the scheduler hearing
  // from the server (a large model takes seconds, or it would be declared dead) and tells the
  // operator how far it got.
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  std::atomic<int64_t> replayed{0}, done{0};
  std::atomic<int> running{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  Status error;
  std::vector<std::thread> threads;
  for (const auto& owned : state_.owned) {
    if (owned.empty()) continue;
    ++running;
    threads.emplace_back([&, owned = &owned] {
      for (int32_t id : *owned) {
        if (failed.load()) break;
        auto n = RecoverPartition(state_, *state_.store->Find(id));
        if (!n.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = n.status();
          failed.store(true);
          break;
        }
        replayed += *n;
        ++done;
      }
      --running;
    });
  }
  while (running.load() > 0) {
    link_->MaybeHeartbeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() - last_progress > std::chrono::seconds(5)) {
      last_progress = std::chrono::steady_clock::now();
      spdlog::info("restoring from {}: {} of {} partitions", dir, done.load(),
                   state_.store->num_partitions());
    }
  }
  for (std::thread& t : threads) t.join();
  if (!error.ok()) return error;
  spdlog::info("restored {} partitions from {}: {} logged updates replayed in {:.2f} s",
               state_.store->num_partitions(), dir, replayed.load(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status();
}

void ServerLoop::MaybeCheckpoint() {
  if (!durable_ || !map_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_checkpoint_ < std::chrono::milliseconds(options_.checkpoint_interval_ms)) return;
  CheckpointOwned(state_, 0);
  last_checkpoint_ = now;
}

// Loads this rank's part of the checkpoint into the partitions (a data dir, new by then, takes
// each as its first checkpoint). Per-worker state moves from the old run's node ids to the
// new ones by rank.
Status ServerLoop::RestoreCut() {
  const std::string& dir = options_.restore_from;
  const auto start = std::chrono::steady_clock::now();
  auto reader = CutReader::Open(dir, link_->rank());
  if (!reader.ok()) return reader.status();
  const proto::CutFileMeta& meta = (*reader)->meta();
  if (meta.clock() != restore_->clock() || !SameMessage(meta.shard_map(), ToProto(*map_))) {
    return Status::FailedPrecondition(fmt::format(
        "checkpoint {} holds another model ({} tensors, {} partitions at clock {}; the cluster "
        "declared {} and {})",
        dir, meta.shard_map().tensors_size(), meta.shard_map().partitions_size(), meta.clock(),
        map_->tensors().size(), map_->partitions().size()));
  }
  std::map<int32_t, int32_t> by_rank, ids;  // new: rank -> id; old id -> new id
  for (const proto::NodeInfo& w : link_->view().workers()) by_rank[w.rank()] = w.id();
  for (const proto::NodeInfo& w : meta.workers()) {
    if (auto it = by_rank.find(w.rank()); it != by_rank.end()) ids[w.id()] = it->second;
  }
  int64_t restored = 0;
  for (const auto& owned : state_.owned) {
    for (int32_t id : owned) {
      auto saved = (*reader)->Read(id);
      if (!saved.ok()) return saved.status();
      RemapWorkers(*saved, ids);
      PartitionState& part = *state_.store->Find(id);
      if (Status s = part.Load(*saved); !s.ok()) {
        return Status(s.code(), fmt::format("checkpoint {}: {}", dir, s.message()));
      }
      if (durable_) {
        if (Status s = durable_->Checkpoint(id, part); !s.ok()) return s;
      }
      ++restored;
      link_->MaybeHeartbeat();
    }
  }
  spdlog::info("restored {} partitions from checkpoint {} (clock {}) in {:.2f} s", restored, dir,
               meta.clock(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status();
}

void ServerLoop::OnCheckpoint(const proto::Header& h) {
  const proto::Cut& cut = h.cut();
  if (cut.abort()) {
    if (cut_ && cut_->request_id == h.request_id() && !cut_->job) {
      spdlog::info("checkpoint at clock {} called off", cut.clock());
      std::deque<Envelope> deferred = std::move(cut_->deferred);
      cut_.reset();
      ReleaseDeferred(std::move(deferred));
    }
    return;
  }
  auto refuse = [&](Status s) {
    proto::Header r = ErrorReply(h, s, link_->id());
    r.mutable_cut()->set_clock(cut.clock());
    r.mutable_cut()->set_seen_clock(max_clock_seen_);
    link_->Send(r);
  };
  if (!map_) return refuse(Status::Unavailable("no shard map installed yet"));
  if (cut_ && cut_->job) {
    return refuse(Status::Unavailable(
        fmt::format("still writing the checkpoint at clock {}", cut_->cut.clock())));
  }
  if (max_clock_seen_ >= cut.clock()) {
    return refuse(Status::Aborted(
        fmt::format("clock {} was served already (up to {}); a checkpoint needs a later clock",
                    cut.clock(), max_clock_seen_)));
  }
  std::deque<Envelope> earlier;  // a repeated request replaces the one pending
  if (cut_) earlier = std::move(cut_->deferred);
  cut_.emplace();
  cut_->request_id = h.request_id();
  cut_->cut = cut;
  ReleaseDeferred(std::move(earlier));
  ProgressCut();
}

void ServerLoop::ProgressCut() {
  if (!cut_) return;
  const int64_t clock = cut_->cut.clock();
  if (!cut_->job) {
    // With no live worker left the cluster is shutting down (the scheduler calls the cut
    // off): its clock will never be reached.
    const int64_t slowest = gate_->slowest_clock();
    if (slowest < clock || slowest == kUnbounded) return;
    // Every live worker finished clock - 1 and nothing later was served: each owner writes its
    // partitions after everything handed over before (FIFO), rounds of clock - 1 included.
    std::error_code ec;
    std::filesystem::create_directories(cut_->cut.dir(), ec);
    proto::CutFileMeta meta;
    meta.set_format(kCutFileFormat);
    meta.set_server_rank(link_->rank());
    meta.set_clock(clock);
    *meta.mutable_shard_map() = ToProto(*map_);
    for (const proto::NodeInfo& w : link_->view().workers()) *meta.add_workers() = w;
    cut_->writing_since = std::chrono::steady_clock::now();
    cut_->job = std::make_shared<CutJob>(cut_->cut.dir(), std::move(meta), 1 + options_.threads);
    apply_threads_->WriteCut(cut_->job);
    cut_->job->Write(*state_.store, 0, state_.owned[0]);
    // The apply threads write before anything handed over from now on, and this thread's
    // partitions are written: what waited may go on.
    ReleaseDeferred(std::exchange(cut_->deferred, {}));
  }
  if (!cut_->job->done()) return;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_->writing_since).count();
  proto::Header req;
  req.set_type(proto::CHECKPOINT);
  req.set_request_id(cut_->request_id);
  const Status s = cut_->job->status();
  proto::Header r =
      s.ok() ? ReplyTo(req, proto::CHECKPOINT_DONE, link_->id()) : ErrorReply(req, s, link_->id());
  *r.mutable_cut() = cut_->cut;
  r.mutable_cut()->set_bytes(cut_->job->bytes());
  r.mutable_cut()->set_seconds(secs);
  link_->Send(r);
  if (s.ok()) {
    spdlog::info("checkpoint at clock {}: {} partitions, {:.1f} MiB written to {} in {:.2f} s",
                 clock, state_.store->num_partitions(), cut_->job->bytes() / 1048576.0,
                 cut_->cut.dir(), secs);
  } else {
    spdlog::error("checkpoint at clock {} failed: {}", clock, s.ToString());
  }
  cut_.reset();
}

// Hands requests held back for a checkpoint to the usual path, in their order (some may wait
// again, for a later checkpoint).
void ServerLoop::ReleaseDeferred(std::deque<Envelope> deferred) {
  for (Envelope& env : deferred) HandleWorker(env);
}

Status ServerLoop::InstallShardMap(const proto::ShardMap& proto_map) {
  if (map_) return Status::FailedPrecondition("a shard map is already installed");
  auto map = ShardMapFromProto(proto_map);
  if (!map.ok()) return map.status();
  for (const Partition& p : map->partitions()) {
    const int64_t bytes = p.length * static_cast<int64_t>(sizeof(float));
    if (p.server_rank == link_->rank() && bytes > options_.max_partition_bytes) {
      // It could never read a push of that partition: it stops with the reason.
      fatal_ = Status::FailedPrecondition(fmt::format(
          "partition {} holds {} bytes, more than --max_partition_bytes={} (the largest frame "
          "this server reads): raise it, or lower the scheduler's --partition_bytes",
          p.id, bytes, options_.max_partition_bytes));
      return fatal_;
    }
  }
  map_ = std::move(*map);
  int64_t owned = 0;
  for (const Partition& p : map_->partitions()) owned += p.server_rank == link_->rank();
  // A worker waits on at most one read per partition and a clock at a time; room for 4 of each.
  gate_->SetParkedLimit(std::max<int64_t>(4096, 4 * owned));
  state_.optimizer = std::move(optimizer_);
  state_.map = &*map_;
  state_.codecs = &codecs_;
  state_.store = std::make_unique<PartitionStore>(*map_, link_->rank(), *state_.optimizer,
                                                  *initializer_, &*aggregator_);
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank != link_->rank()) continue;
    auto& slot = state_.layers[map_->tensors()[p.tensor_id].layer];
    if (!slot) slot = std::make_unique<ServingState::LayerCounters>();
  }
  state_.owned.assign(1 + options_.threads, {});
  for (const Partition& p : map_->partitions()) {
    if (p.server_rank == link_->rank()) state_.owned[Owner(p)].push_back(p.id);
  }
  if (durable_) {
    durable_->Prepare(map_->partitions().size());
    state_.durable = durable_.get();
    state_.checkpoint_interval_ms = options_.checkpoint_interval_ms;
    if (Status s = RestoreShards(); !s.ok()) {
      fatal_ = s;                // this server cannot serve this cluster: it stops with the reason
      state_.durable = nullptr;  // and writes nothing into a data dir that is not this model's
      return s;
    }
  }
  if (restore_) {
    if (Status s = RestoreCut(); !s.ok()) {
      fatal_ = s;
      state_.durable = nullptr;
      return s;
    }
  }
  apply_threads_->Start(state_);
  spdlog::info("holding {} partitions, {:.1f} MiB ({} tensors in the map)",
               state_.store->num_partitions(), state_.store->bytes() / 1048576.0,
               map_->tensors().size());
  return Status();
}

void ServerLoop::HandleControl(Envelope& env) {
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
    case proto::NODE_DEAD: {
      dead_.insert(h.node());
      shm_.erase(h.node());
      cma_.Forget(h.node());
      const proto::NodeInfo* node = link_->view().Node(h.node());
      const bool worker = node != nullptr && node->role() == proto::WORKER;
      spdlog::warn("{} {} declared dead by the scheduler", worker ? "worker" : "node", h.node());
      if (worker) gate_->RemoveWorker(h.node(), "is dead");
      break;
    }
    case proto::NODE_LEFT:
      shm_.erase(h.node());
      cma_.Forget(h.node());
      gate_->RemoveWorker(h.node(), "finished");
      break;
    case proto::WORKER_JOINED:
      return OnWorkerJoined(h);
    case proto::SET_POLICY: {
      Status s = gate_->Switch(h.policy().consistency());
      if (!s.ok())
        spdlog::warn("consistency '{}' refused: {}", h.policy().consistency(), s.ToString());
      link_->Send(s.ok() ? ReplyTo(h, proto::POLICY_ACK, link_->id())
                         : ErrorReply(h, s, link_->id()));
      break;
    }
    case proto::CHECKPOINT:
      return OnCheckpoint(h);
    case proto::POLICY_HINT:
      gate_->OnHint({h.stragglers().begin(), h.stragglers().end()}, h.quorum());
      break;
    case proto::ROUND_CLOSE: {
      // Handed to the partition owners before anything that arrives after it (FIFO), so a
      // pull of the next round reads the model with this one applied.
      std::vector<RoundSpec::Late> late;
      for (const proto::LateUpload& l : h.fed_round().late()) {
        if (!(l.factor() > 0 && l.factor() <= 1) || l.round() >= h.fed_round().round()) {
          spdlog::warn(
              "round {} closes with a malformed late upload (worker {}, round {}, "
              "factor {}); it is not applied",
              h.fed_round().round(), l.worker(), l.round(), l.factor());
          continue;
        }
        late.push_back({l.worker(), l.round(), l.factor()});
      }
      gate_->OnRoundClosed(h.fed_round().round(),
                           {h.fed_round().workers().begin(), h.fed_round().workers().end()},
                           {h.fed_round().tasks().begin(), h.fed_round().tasks().end()}, late,
                           h.fed_round().late_rounds());
      proto::Header ack = ReplyTo(h, proto::ROUND_CLOSED, link_->id());
      *ack.mutable_fed_round() = h.fed_round();
      link_->Send(ack);
      break;
    }
    case proto::SHUTDOWN:
      spdlog::info("shutdown requested by the scheduler");
      shutdown_ = true;
      break;
    case proto::HEARTBEAT:
      break;
    case proto::ERROR:
      if (h.error() == StatusCode::kUnregistered) {
        // Declared dead while alive (it stalled past the heartbeat timeout): the cluster has
        // stopped routing to it, so it stops too; restarted on its data dir it takes its rank
        // over again (hetps launch --restart does that).
        fatal_ = Status::Aborted(fmt::format(
            "the scheduler declared this server dead ({}); stopping so that a restart takes its "
            "rank over",
            h.error_message()));
        break;
      }
      spdlog::warn("the scheduler reported: {}", StatusOf(h).ToString());
      break;
    default:
      spdlog::debug("ignoring control message {}", proto::MsgType_Name(h.type()));
  }
}

// A worker joined the running cluster: its requests are accepted and the controller counts it
// from the clock it reports back (the scheduler gives the worker the highest of them).
void ServerLoop::OnWorkerJoined(const proto::Header& h) {
  if (h.view().nodes_size() != 1 || h.view().nodes(0).role() != proto::WORKER) {
    spdlog::warn("ignoring a malformed WORKER_JOINED");
    return;
  }
  const proto::NodeInfo& worker = h.view().nodes(0);
  if (link_->view().Node(worker.id()) == nullptr) link_->view().Add(worker);  // else a repeat
  proto::Header ack = ReplyTo(h, proto::WORKER_JOINED_ACK, link_->id());
  ack.set_node(worker.id());
  ack.set_clock(gate_->AddWorker(worker.id()));
  link_->Send(ack);
}

}  // namespace

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.threads < 1 || o.threads > 64) {
    return Status::InvalidArgument(fmt::format("threads must be in [1, 64], got {}", o.threads));
  }
  if (o.max_connections_per_address < 0) {
    return Status::InvalidArgument(
        fmt::format("max_connections_per_address must be >= 0 (0: no limit), got {}",
                    o.max_connections_per_address));
  }
  if (o.max_partition_bytes < 4 || o.max_partition_bytes > (int64_t{1} << 40)) {
    return Status::InvalidArgument(
        fmt::format("max_partition_bytes must be in [4, 2^40], got {}", o.max_partition_bytes));
  }
  if (auto opt = Optimizers().Parse(o.optimizer); !opt.ok()) return opt.status();
  if (auto init = Initializer::Make(o.init); !init.ok()) return init.status();
  auto consistency = Controllers().Parse(o.consistency);
  if (!consistency.ok()) return consistency.status();
  auto aggregator = Aggregators().Parse(o.aggregator);
  if (!aggregator.ok()) return aggregator.status();
  if (auto d = ParseDurability(o.durability); !d.ok()) return d.status();
  if (o.checkpoint_interval_ms < 1) {
    return Status::InvalidArgument(
        fmt::format("checkpoint_interval_ms must be >= 1, got {}", o.checkpoint_interval_ms));
  }
  return CheckCombination(*aggregator, *consistency);
}

ServerNode::ServerNode(ServerOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

Status ServerNode::Run() {
  ServerLoop loop(options_, stop_);
  return loop.Run();
}

}  // namespace hetps
