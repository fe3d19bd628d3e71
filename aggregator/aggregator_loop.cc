#include "aggregator/aggregator_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "common/dial.h"
#include "common/logging.h"
#include "common/tier.h"

namespace hetps {

namespace {

int64_t MaxFrame(int64_t max_partition_bytes) { return 2 * max_partition_bytes + (64 << 10); }

}  // namespace

Status ValidateAggregatorOptions(const AggregatorOptions& o) {
  if (o.max_open < 1) {
    return Status::InvalidArgument(fmt::format("max_open must be >= 1, got {}", o.max_open));
  }
  if (o.max_partition_bytes < 4 || o.max_partition_bytes > (int64_t{1} << 40)) {
    return Status::InvalidArgument(
        fmt::format("max_partition_bytes must be in [4, 2^40], got {}", o.max_partition_bytes));
  }
  if (o.window_ms > 600000) {
    return Status::InvalidArgument(fmt::format(
        "window_ms must be at most 600000 (negative: by the consistency), got {}", o.window_ms));
  }
  if (o.switch_chunk < 0 || o.switch_chunk > (1 << 20) || o.switch_slots < 1 ||
      o.switch_slots > 4096 || !(o.switch_clip > 0)) {
    return Status::InvalidArgument(fmt::format(
        "switch_chunk must be in [0, 2^20] words, switch_slots in [1, 4096] and switch_clip > 0 "
        "(got {}, {}, {})",
        o.switch_chunk, o.switch_slots, o.switch_clip));
  }
  return Status();
}

AggregatorLoop::AggregatorLoop(AggregatorOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

double AggregatorLoop::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Status AggregatorLoop::Setup() {
  if (Status s = ValidateAggregatorOptions(options_); !s.ok()) return s;
  router_.emplace(ctx_, zmq::socket_type::router);
  router_->set(zmq::sockopt::linger, 0);
  router_->set(zmq::sockopt::sndhwm, 0);
  router_->set(zmq::sockopt::maxmsgsize, MaxFrame(options_.max_partition_bytes));
  guard_.emplace(*router_, options_.max_connections_per_address, "aggregator");
  if (Status s = CheckListenEndpoint(options_.bind, options_.auth, options_.insecure); !s.ok()) {
    return s;
  }
  if (options_.auth.curve) {  // workers' keys only, each the key its worker registered with
    zap_.emplace(ctx_, options_.auth.allow,
                 std::map<std::string, std::set<KeyRole>>{{"aggregator", {KeyRole::kWorker}}});
    options_.auth.SecureServer(*router_, "aggregator");
  }
  try {
    router_->bind(options_.bind);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot bind '{}': {}", options_.bind, e.what()));
  }
  const std::string endpoint = BoundEndpoint(*router_);
  std::string address = options_.advertise.empty() ? endpoint : options_.advertise;
  if (address.ends_with(":*")) {
    address.replace(address.size() - 1, 1, endpoint.substr(endpoint.rfind(':') + 1));
  }
  if (address.find("0.0.0.0") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "bound to {}: pass --advertise=tcp://<reachable host>:<port> for workers to dial",
        endpoint));
  }
  link_ = std::make_unique<SchedulerLink>(ctx_, options_.scheduler, proto::AGGREGATOR, address,
                                          options_.heartbeat_interval_ms, options_.auth);
  if (options_.switch_chunk > 0) {  // what the workers stream (the bits: by the group's size)
    proto::SwitchSpec& spec = *link_->registration().mutable_switch_spec();
    spec.set_chunk(options_.switch_chunk);
    spec.set_slots(options_.switch_slots);
    spec.set_clip(options_.switch_clip);
  }
  spdlog::info("listening on {} (advertised {})", endpoint, address);
  return Status();
}

Status AggregatorLoop::Connect(const proto::NodeInfo& server) {
  auto sock = Dial(ctx_, link_->id(), server.address(), options_.auth, server.public_key());
  if (!sock.ok()) {
    return Status(sock.status().code(),
                  fmt::format("server rank {}: {}", server.rank(), sock.status().message()));
  }
  servers_[server.rank()] = std::move(*sock);
  return Status();
}

Status AggregatorLoop::ConnectServers() {
  servers_.resize(static_cast<size_t>(link_->view().num_servers()));
  for (const proto::NodeInfo& server : link_->view().servers()) {
    if (server.rank() < 0 || server.rank() >= static_cast<int>(servers_.size())) {
      return Status::Malformed(fmt::format("the view names server rank {}", server.rank()));
    }
    if (Status s = Connect(server); !s.ok()) return s;
  }
  return Status();
}

Status AggregatorLoop::Run() {
  if (Status s = Setup(); !s.ok()) return s;
  if (Status s = link_->Join(stop_, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("aggregator", link_->id());
  if (Status s = ConnectServers(); !s.ok()) return s;
  GroupSum::Options g;
  g.group = GroupOf(link_->view(), link_->id());
  g.by_clock = link_->view().proto().policy().synchronous();
  g.wait_s = (options_.window_ms >= 0 ? options_.window_ms : g.by_clock ? 1000.0 : 2.0) / 1000;
  g.max_open = static_cast<size_t>(options_.max_open);
  sums_.emplace(g);
  if (options_.switch_chunk > 0) {
    SwitchSum::Options o;
    o.spec = link_->registration().switch_spec();
    o.group = g.group;
    o.wait_s = options_.window_ms >= 0 ? options_.window_ms / 1000 : 1.0;
    o.max_elements = options_.max_partition_bytes / 4;
    o.next_id = [this] { return next_request_++; };
    auto made = SwitchSum::Make(o, 1);
    if (!made.ok()) return made.status();
    switch_.emplace(std::move(*made));
    if (!g.by_clock) {
      spdlog::warn(
          "switch emulation streams pushes under synchronous consistency only; this "
          "cluster's workers push whole pushes, summed per window");
    }
  }
  link_->SetReporter([this](proto::Header& h) {
    proto::AggregatorReport& r = *h.mutable_aggregator_report();
    r.set_pushes(counts_.pushes);
    r.set_sums(counts_.sums);
    r.set_bytes_in(counts_.bytes_in);
    r.set_bytes_up(counts_.bytes_up);
    r.set_pulls(counts_.pulls);
    r.set_pulls_up(counts_.pulls_up);
    r.set_refused(counts_.refused);
    r.set_server_errors(counts_.server_errors);
    r.set_open_sums(static_cast<int64_t>(sums_->open()));
    r.set_group(static_cast<int32_t>(sums_->live().size()));
    if (switch_) {
      r.set_slot_bytes(static_cast<int64_t>(switch_->slot_bytes()));
      r.set_peak_slot_bytes(static_cast<int64_t>(switch_->peak_slot_bytes()));
      r.set_chunks(counts_.chunks);
    }
  });
  const std::string joined = fmt::format(
      "joined as aggregator {}: {} workers of this host push through it, summed {} (wait {} ms)",
      link_->rank(), g.group.size(),
      switch_ && g.by_clock ? fmt::format("as a switch, in chunks of {} words over {} slots",
                                          options_.switch_chunk, options_.switch_slots)
      : g.by_clock          ? std::string("per clock")
                            : std::string("per window"),
      g.wait_s * 1000);
  spdlog::info("{}", joined);
  if (g.group.empty()) spdlog::warn("no worker of the view runs on this host: nothing to sum");
  if (options_.on_joined) options_.on_joined(joined);
  while (!shutdown_ && !stop_.load()) {
    Poll();
    SendUp(sums_->Due(Now()));
    if (switch_) FailStreams(switch_->Due(Now()));
    if (link_->SchedulerLost()) {
      FailUpstream(-1, Status::Unavailable("the aggregator lost the scheduler; push directly"));
      return Status::Unavailable("no word from the scheduler; stopping");
    }
  }
  // Whatever waits here is answered: its workers send it directly (nothing is lost).
  FailUpstream(-1, Status::Unavailable("the aggregator is stopping; push directly"));
  spdlog::info(
      "stopped: {} pushes summed into {} sums ({} bytes in, {} up), {} pulls answered with {} "
      "from the servers, {} refused",
      counts_.pushes, counts_.sums, counts_.bytes_in, counts_.bytes_up, counts_.pulls,
      counts_.pulls_up, counts_.refused);
  if (switch_) {
    spdlog::info("switch: {} chunks summed, its slots held at most {} bytes", counts_.chunks,
                 switch_->peak_slot_bytes());
  }
  return Status();
}

void AggregatorLoop::Poll() {
  std::vector<zmq::pollitem_t> items = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                        {link_->socket().handle(), 0, ZMQ_POLLIN, 0}};
  for (zmq::socket_t& s : servers_) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  const double due = sums_->NextDue(Now());
  const int timeout = due < 0 ? 100 : std::min(100, static_cast<int>(due * 1000) + 1);
  zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout));
  link_->MaybeHeartbeat();
  for (size_t rank = 0; rank < servers_.size(); ++rank) {
    if (!(items[2 + rank].revents & ZMQ_POLLIN)) continue;
    for (int n = 0; n < 1024; ++n) {
      auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
      if (!env) break;
      OnServerReply(static_cast<int>(rank), *env);
    }
  }
  for (int n = 0; n < 1024 && (items[0].revents & ZMQ_POLLIN); ++n) {
    auto env = Receive(*router_, zmq::recv_flags::dontwait, /*routed=*/true);
    if (!env) break;
    OnPush(*env);
  }
  while (items[1].revents & ZMQ_POLLIN) {
    auto env = Receive(link_->socket(), zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) break;
    link_->Heard();
    if (env->status.ok()) OnControl(*env);
  }
}

Status AggregatorLoop::CheckRequest(const Envelope& env) const {
  if (!env.status.ok()) return env.status;
  const proto::Header& h = env.message.header;
  const proto::Policy& policy = link_->view().proto().policy();
  const bool pulls = policy.shared_reads();
  if (h.type() == proto::PUSH && !policy.summed_pushes()) {
    return Status::FailedPrecondition(
        "this cluster's servers take no sums of pushes (Policy.summed_pushes); push directly");
  }
  if (h.type() != proto::PUSH && (h.type() != proto::PULL || !pulls)) {
    return Status::InvalidArgument(
        fmt::format("an aggregator of this cluster takes pushes{}, not {}",
                    pulls ? " and pulls" : "", proto::MsgType_Name(h.type())));
  }
  if (!IsNodeIdentity(env.identity, h.sender()) || !sums_->live().contains(h.sender())) {
    return Status::Unregistered(fmt::format(
        "node {} is not a live worker of this aggregator's group; push directly", h.sender()));
  }
  const proto::NodeInfo* node = link_->view().Node(h.sender());
  if (options_.auth.curve && (node == nullptr || node->public_key() != env.peer)) {
    return Status::PermissionDenied(
        fmt::format("worker {} registered with another key than this connection's", h.sender()));
  }
  if (!h.has_rank() || h.rank() < 0 || h.rank() >= static_cast<int>(servers_.size())) {
    return Status::InvalidArgument(
        fmt::format("a request to an aggregator names the server rank it goes to (0..{}), not {}",
                    static_cast<int>(servers_.size()) - 1, h.has_rank() ? h.rank() : -1));
  }
  if (h.partition() < 0 || h.num_keys() != 0 || h.shm_length() != 0 || h.cma_length() != 0 ||
      !h.contributions().empty()) {
    return Status::Malformed(fmt::format("worker {}'s {} of partition {} is not a plain one",
                                         h.sender(), proto::MsgType_Name(h.type()), h.partition()));
  }
  return Status();
}

Status AggregatorLoop::CheckPush(const Envelope& env) const {
  if (Status s = CheckRequest(env); !s.ok()) return s;
  const proto::Header& h = env.message.header;
  if (env.message.payload.size() != 1) {
    return Status::Malformed(fmt::format(
        "worker {}'s push of partition {} is not one dense frame of float32 or a codec's bytes",
        h.sender(), h.partition()));
  }
  const int64_t n = h.num_elements();
  if (n < 1 || n > options_.max_partition_bytes / 4) {
    return Status::SizeMismatch(
        fmt::format("worker {} pushed {} elements; this aggregator takes "
                    "1..{}",
                    h.sender(), n, options_.max_partition_bytes / 4));
  }
  if (h.codec().empty() && env.message.payload[0].size() != static_cast<size_t>(n) * 4) {
    return Status::SizeMismatch(fmt::format("worker {} pushed {} bytes for {} float32 elements",
                                            h.sender(), env.message.payload[0].size(), n));
  }
  return Status();
}

StatusOr<std::span<const float>> AggregatorLoop::Decode(const proto::Header& h,
                                                        const zmq::message_t& frame) {
  const auto n = static_cast<size_t>(h.num_elements());
  PartitionCodec& pc = codecs_[h.partition()];
  if (pc.wire.empty() && !pc.codec && !h.codec().empty()) {
    auto codec = codec_cache_.Get(h.codec());
    if (!codec.ok()) return codec.status();
    pc.codec = *codec;
    pc.wire = h.codec();
    pc.state = pc.codec->NewState(h.num_elements());
  }
  if (h.codec() != pc.wire) {
    return Status::InvalidArgument(
        fmt::format("partition {} was pushed here in codec '{}', and now in '{}'", h.partition(),
                    pc.wire, h.codec()));
  }
  if (!pc.codec && reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) == 0) {
    return std::span<const float>(static_cast<const float*>(frame.data()), n);  // in place
  }
  scratch_.resize(n);
  if (!pc.codec) {
    std::memcpy(scratch_.data(), frame.data(), n * sizeof(float));
    return std::span<const float>(scratch_);
  }
  compress::CodecContext ctx;
  ctx.key = {0, h.partition(), h.clock()};
  if (Status s = pc.codec->Decode(static_cast<const uint8_t*>(frame.data()), frame.size(),
                                  h.num_elements(), ctx, scratch_.data());
      !s.ok()) {
    return s;
  }
  return std::span<const float>(scratch_);
}

void AggregatorLoop::OnPull(Envelope& env) {
  if (Status s = CheckRequest(env); !s.ok()) return Refuse(env, s);
  const proto::Header& h = env.message.header;
  if (!env.message.payload.empty()) {
    return Refuse(env, Status::Malformed("a pull carries no payload"));
  }
  const GroupSum::Waiter waiter{env.identity, h.request_id(), h.sender(), h.clock()};
  ++counts_.pulls;
  if (SharedReads::Reply* kept = reads_.Kept(h.sender(), h.partition(), h.clock(), h.codec())) {
    return AnswerPull({waiter}, kept->header, kept->frame);
  }
  if (auto up = reads_.InFlight(h.sender(), h.partition(), h.clock(), h.codec())) {
    upstream_[*up].waiters.push_back(waiter);
    return;
  }
  if (dead_servers_.contains(h.rank())) {
    return Refuse(
        env, Status::Unavailable(fmt::format("server rank {} is down; pull directly", h.rank())));
  }
  proto::Header up = h;
  up.set_request_id(next_request_++);
  up.set_sender(link_->id());
  up.clear_rank();
  up.add_contributions()->set_worker(h.sender());  // whose read it is
  reads_.Sent(h.partition(), up.request_id(), h.clock(), h.codec());
  upstream_[up.request_id()] = {h.rank(), h.partition(), {waiter}, /*pull=*/true};
  ++counts_.pulls_up;
  hetps::Send(servers_[h.rank()], up);
}

void AggregatorLoop::AnswerPull(const std::vector<GroupSum::Waiter>& waiters,
                                const proto::Header& reply, zmq::message_t& frame) {
  for (const GroupSum::Waiter& w : waiters) {
    proto::Header r = reply;
    r.set_request_id(w.request_id);
    r.set_sender(link_->id());
    std::vector<zmq::message_t> payload(1);
    payload[0].copy(frame);  // shares the bytes (ZeroMQ counts the references)
    SendRouted(*router_, w.identity, r, std::move(payload));
  }
}

void AggregatorLoop::OnPush(Envelope& env) {
  if (env.status.ok() && env.message.header.type() == proto::PULL) return OnPull(env);
  if (env.status.ok() && env.message.header.has_chunk()) return OnChunk(env);
  if (Status s = CheckPush(env); !s.ok()) return Refuse(env, s);
  const proto::Header& h = env.message.header;
  auto values = Decode(h, env.message.payload[0]);
  if (!values.ok()) {
    const Status& s = values.status();
    return Refuse(env, Status(s.code(), fmt::format("worker {}'s push of partition {}: {}",
                                                    h.sender(), h.partition(), s.message())));
  }
  auto done = sums_->Add(h, env.identity, *values, Now());
  if (!done.ok()) return Refuse(env, done.status());
  ++counts_.pushes;
  counts_.bytes_in += static_cast<int64_t>(env.message.payload[0].size());
  SendUp(std::move(*done));
}

void AggregatorLoop::SendUp(std::vector<GroupSum::Sum> sums) {
  for (GroupSum::Sum& s : sums) SendUp(std::move(s));
}

void AggregatorLoop::SendUp(GroupSum::Sum&& sum) {
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_sender(link_->id());
  h.set_request_id(next_request_++);
  h.set_partition(sum.partition);
  h.set_clock(sum.clock);
  h.set_version(sum.base_version);
  h.set_weight(sum.weight);
  h.set_layer(sum.layer);
  h.set_dtype(proto::FLOAT32);
  h.set_num_elements(static_cast<int64_t>(sum.values.size()));
  if (sum.loss) h.set_loss(*sum.loss);
  for (proto::Contribution& c : sum.contributions) *h.add_contributions() = std::move(c);
  if (dead_servers_.contains(sum.rank)) {
    return Answer(sum.waiters, ErrorReply(h,
                                          Status::Unavailable(fmt::format(
                                              "server rank {} is down; push directly", sum.rank)),
                                          link_->id()));
  }
  std::vector<zmq::message_t> payload;
  PartitionCodec& pc = codecs_[sum.partition];
  if (pc.codec) {  // encoded again, the residual kept for the next sum (error feedback)
    std::vector<uint8_t> bytes;
    compress::CodecContext ctx;
    ctx.key = {0, sum.partition, sum.clock};
    pc.codec->Encode(sum.values.data(), static_cast<int64_t>(sum.values.size()), ctx,
                     pc.state.get(), bytes);
    h.set_codec(pc.wire);
    payload.push_back(OwnedFrame(std::move(bytes)));
  } else {  // the sum's own buffer goes out, freed once sent
    auto* values = new std::vector<float>(std::move(sum.values));
    payload.emplace_back(
        values->data(), values->size() * sizeof(float),
        [](void*, void* hint) { delete static_cast<std::vector<float>*>(hint); }, values);
  }
  ++counts_.sums;
  counts_.bytes_up += static_cast<int64_t>(payload[0].size());
  upstream_[h.request_id()] = {sum.rank, sum.partition, std::move(sum.waiters), /*pull=*/false};
  hetps::Send(servers_[sum.rank], h, std::move(payload));
}

void AggregatorLoop::OnServerReply(int rank, Envelope& env) {
  if (!env.status.ok()) {
    spdlog::warn("malformed reply from server rank {}: {}", rank, env.status.ToString());
    return;
  }
  const proto::Header& h = env.message.header;
  auto it = upstream_.find(h.request_id());
  if (it == upstream_.end() || it->second.rank != rank ||
      (h.type() != proto::PUSH_REPLY && h.type() != proto::PULL_REPLY &&
       h.type() != proto::ERROR)) {
    spdlog::warn("reply {} ({}) from server rank {} matches no sum", h.request_id(),
                 proto::MsgType_Name(h.type()), rank);
    return;
  }
  if (h.type() == proto::ERROR) {
    ++counts_.server_errors;
    if (counts_.server_errors <= 20 || counts_.server_errors % 1000 == 0) {
      spdlog::warn("server rank {} refused a sum: {}", rank, StatusOf(h).ToString());
    }
  }
  Upstream up = std::move(it->second);
  upstream_.erase(it);
  if (switch_ && h.type() == proto::ERROR) switch_->Abandon(h.request_id());
  if (!up.pull) {
    if (h.type() == proto::PUSH_REPLY) {  // later pulls of these workers must come after it
      for (const GroupSum::Waiter& w : up.waiters) {
        reads_.Acked(w.worker, up.partition, h.request_id());
      }
    }
    return Answer(up.waiters, h);
  }
  if (h.type() != proto::PULL_REPLY || env.message.payload.size() != 1) {
    reads_.Failed(up.partition, h.request_id());
    return Answer(up.waiters,
                  h.type() == proto::ERROR
                      ? h
                      : ErrorReply(h, Status::Malformed("a malformed pull reply"), link_->id()));
  }
  SharedReads::Reply& reply =
      reads_.Answered(up.partition, h.request_id(), {h, std::move(env.message.payload[0])});
  AnswerPull(up.waiters, reply.header, reply.frame);
}

void AggregatorLoop::Answer(const std::vector<GroupSum::Waiter>& waiters,
                            const proto::Header& reply) {
  for (const GroupSum::Waiter& w : waiters) {
    proto::Header r = reply;
    r.set_request_id(w.request_id);
    r.set_sender(link_->id());
    r.clear_contributions();
    SendRouted(*router_, w.identity, r);
  }
}

// A worker of the group always hears why; a stranger for its first 64 requests only (a peer
// that never reads its replies would otherwise queue them without bound).
void AggregatorLoop::Refuse(const Envelope& env, const Status& s) {
  ++counts_.refused;
  if (counts_.refused <= 20 || counts_.refused % 1000 == 0) {
    spdlog::warn("refused a request from {} ({} so far): {}", env.message.header.sender(),
                 counts_.refused, s.ToString());
  }
  const int32_t sender = env.message.header.sender();
  if (!IsNodeIdentity(env.identity, sender) || !sums_->live().contains(sender)) {
    if (errors_to_strangers_.size() >= 4096) errors_to_strangers_.clear();
    if (++errors_to_strangers_[env.identity] > 64) return;
  }
  SendRouted(*router_, env.identity, ErrorReply(env.message.header, s, link_->id()));
}

void AggregatorLoop::FailUpstream(int rank, const Status& s) {
  proto::Header error = ErrorReply(proto::Header(), s, link_->id());
  for (auto it = upstream_.begin(); it != upstream_.end();) {
    if (rank < 0 || it->second.rank == rank) {
      error.set_partition(-1);
      Answer(it->second.waiters, error);
      if (it->second.pull) reads_.Failed(it->second.partition, it->first);
      if (switch_) switch_->Abandon(it->first);
      it = upstream_.erase(it);
    } else {
      ++it;
    }
  }
  if (rank >= 0) return;
  if (switch_) FailStreams(switch_->TakeAll(s));
  for (GroupSum::Sum& sum : sums_->TakeAll()) {
    error.set_partition(sum.partition);
    Answer(sum.waiters, error);
  }
}

void AggregatorLoop::OnControl(Envelope& env) {
  const proto::Header& h = env.message.header;
  switch (h.type()) {
    case proto::NODE_DEAD:
    case proto::NODE_LEFT: {
      const proto::NodeInfo* node = link_->view().Node(h.node());
      if (node != nullptr && node->role() == proto::SERVER) {
        dead_servers_.insert(node->rank());
        FailUpstream(node->rank(), Status::Unavailable(fmt::format(
                                       "server rank {} died; push directly", node->rank())));
      } else {
        SendUp(sums_->Forget(h.node()));
        if (switch_) FailStreams(switch_->Forget(h.node()));
      }
      break;
    }
    case proto::SERVER_BACK: {
      link_->view() = ClusterView(h.view());
      const proto::NodeInfo* back = link_->view().Node(h.node());
      if (back != nullptr && back->role() == proto::SERVER &&
          back->rank() < static_cast<int>(servers_.size()) && Connect(*back).ok()) {
        dead_servers_.erase(back->rank());
        spdlog::info("server rank {} is back at {}", back->rank(), back->address());
      }
      break;
    }
    case proto::SHUTDOWN:
      shutdown_ = true;
      break;
    default:
      break;
  }
}

}  // namespace hetps
