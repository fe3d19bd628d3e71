#include "worker/client_io.h"

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/logging.h"
#include "worker/shm_channel.h"

namespace hetps {

OpPtr FailedOp(const Status& s) {
  auto op = std::make_shared<Ticket::State>(1);
  op->Complete(s);
  return op;
}

void ReleaseCallerBuffer(void* /*data*/, void* hint) {
  auto* op = static_cast<OpPtr*>(hint);
  (*op)->Complete(Status());
  delete op;
}

IoGate::IoGate() : done_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (done_fd < 0) spdlog::warn("eventfd: {}; waiting callers poll every 100 ms", errno);
}

IoGate::~IoGate() {
  if (done_fd >= 0) close(done_fd);
}

void Ticket::State::WakeLeader() const {
  const uint64_t one = 1;
  if (gate && gate->done_fd >= 0) (void)!write(gate->done_fd, &one, sizeof(one));
}

void LeadUntilDone(Ticket::State& op) {
  IoGate& gate = *op.gate;
  // The first waiter takes the sockets over (the I/O thread holds them only for a turn); a
  // later one leaves them to whoever drives and is woken through op's condition variable.
  const bool first = gate.leaders.fetch_add(1) == 0;
  std::unique_lock<std::mutex> io(gate.mu, std::defer_lock);
  if (first) {
    io.lock();
  } else {
    (void)io.try_lock();
  }
  if (io.owns_lock() && gate.io != nullptr) {
    {
      std::lock_guard<std::mutex> lock(op.mu);
      op.led = op.remaining > 0;
    }
    bool leading = op.led;
    while (leading && gate.io->LeadTurn()) {
      std::lock_guard<std::mutex> lock(op.mu);
      leading = op.remaining > 0;
    }
    {
      std::lock_guard<std::mutex> lock(op.mu);
      op.led = false;
    }
    gate.io->LetGo();
  }
  if (io.owns_lock()) io.unlock();
  gate.leaders.fetch_sub(1);
}

namespace {

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

// What a request counts against its server's in-flight window: the payload it sends, and for a
// pull the values it asks for.
int64_t WindowBytes(const Outgoing& o) {
  int64_t bytes =
      o.header.type() == proto::PULL ? o.dst_len * static_cast<int64_t>(sizeof(float)) : 0;
  for (const zmq::message_t& m : o.payload) bytes += static_cast<int64_t>(m.size());
  return bytes;
}

// How many clocks the values a pull read lag behind the reader's clock: none when the slowest
// worker is at or past it. Both clocks are >= 0 (CheckReply), so the difference cannot overflow.
int64_t ReadStaleness(int64_t reader_clock, int64_t min_clock) {
  return min_clock >= reader_clock ? 0 : reader_clock - min_clock;
}

// A random 64-bit id for this connection, never 0 (0 means unnumbered).
uint64_t DrawIncarnation() {
  std::random_device device;
  std::mt19937_64 rng(
      (static_cast<uint64_t>(device()) << 32) ^ device() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  uint64_t id = 0;
  while (id == 0) id = rng();
  return id;
}

}  // namespace

ClientIo::ClientIo(const ClientOptions& options, Auth auth, ClientReport& report, PullState& pulls)
    : options_(options),
      auth_(std::move(auth)),
      report_(report),
      pulls_(pulls),
      link_(ctx_, options.scheduler, proto::WORKER, "", options.heartbeat_interval_ms, auth_),
      wake_in_(ctx_, zmq::socket_type::pull),
      wake_out_(ctx_, zmq::socket_type::push),
      incarnation_(DrawIncarnation()) {
  if (options_.link.enabled() && !options_.link.outside) shaper_.emplace(options_.link);
  // An emulated link delays sends and replies on the I/O thread's clock: it keeps them.
  caller_io_ = options_.caller_io && !shaper_;
}

double ClientIo::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Data requests smaller than options.batch_bytes wait in their server's batch until the I/O
// thread has sent everything it has (FlushBatches, before it polls): a step's small requests
// leave as a few messages instead of one each. Anything else first sends the batch, so requests
// leave in the order they were given.
void ClientIo::SendToServer(int rank, proto::Header&& header, std::vector<zmq::message_t> payload) {
  // A request whose values skip the socket (a co-located transport) counts their bytes too: a
  // large one leaves at once, so the server works on it while this thread prepares the next
  // one (through shared memory: copies it), instead of the whole step before the first header.
  int64_t bytes = header.shm_length() + header.cma_length();
  for (const zmq::message_t& m : payload) bytes += static_cast<int64_t>(m.size());
  const proto::MsgType type = header.type();
  const bool data =
      type == proto::PUSH || type == proto::PULL || type == proto::INIT || type == proto::CLOCK;
  if (options_.batch_bytes > 0 && data && bytes < options_.batch_bytes) {
    Batch& batch = batches_[rank];
    if (!batch.Fits(bytes)) FlushBatch(rank);
    batch.Add(std::move(header), std::move(payload));
    return;
  }
  FlushBatch(rank);
  Emit(rank, header, std::move(payload));
}

void ClientIo::FlushBatch(int rank) {
  batches_[rank].Flush(link_.id(), [&](const proto::Header& h, std::vector<zmq::message_t> p) {
    Emit(rank, h, std::move(p));
  });
}

void ClientIo::FlushBatches() {
  for (int rank = 0; rank < static_cast<int>(batches_.size()); ++rank) FlushBatch(rank);
}

// A server that died or a cluster that closed: what waits in its batch is dropped with its
// socket (the requests are pending: they are resent to a restarted server, or fail).
void ClientIo::DropBatch(int rank) { batches_[rank].Clear(); }

void ClientIo::Emit(int rank, const proto::Header& header, std::vector<zmq::message_t> payload) {
  report_.OnMessage();
  if (!shaper_) {
    hetps::Send(servers_[rank], header, std::move(payload));
    dirty_[rank] = 1;
    return;
  }
  size_t bytes = header.ByteSizeLong();
  for (const zmq::message_t& m : payload) bytes += m.size();
  outbound_.push_back({shaper_->Up(bytes, Now()), rank, header, std::move(payload), {}});
}

// Sends the requests and hands over the replies whose time on the emulated link has come; those
// of a server that died meanwhile are dropped (their requests failed or wait for its return).
void ClientIo::ReleaseDue() {
  const double now = Now();
  auto gone = [&](int rank) { return dead_servers_.contains(rank) || recovering_.contains(rank); };
  while (!outbound_.empty() && outbound_.front().due <= now) {
    Delayed d = std::move(outbound_.front());
    outbound_.pop_front();
    if (!gone(d.rank)) {
      hetps::Send(servers_[d.rank], d.header, std::move(d.payload));
      dirty_[d.rank] = 1;
    }
  }
  while (!inbound_.empty() && inbound_.front().due <= now) {
    Delayed d = std::move(inbound_.front());
    inbound_.pop_front();
    if (!gone(d.rank)) OnReply(*d.reply, d.rank);
  }
}

int ClientIo::PollTimeoutMs() const {
  double due = std::numeric_limits<double>::infinity();
  if (!outbound_.empty()) due = outbound_.front().due;
  if (!inbound_.empty()) due = std::min(due, inbound_.front().due);
  if (!std::isfinite(due)) return 100;
  return static_cast<int>(std::clamp(std::ceil((due - Now()) * 1000), 0.0, 100.0));
}

ClientIo::~ClientIo() { Stop(); }

Status ClientIo::Start(const std::atomic<int64_t>& heartbeat_clock) {
  static const std::atomic<bool> never{false};
  const std::atomic<bool>& stop = options_.stop ? *options_.stop : never;
  if (options_.rank >= 0) link_.registration().set_rank(options_.rank);
  if (Status s = link_.Join(stop, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("worker", link_.id());
  servers_.resize(link_.view().servers().size());
  dirty_.assign(servers_.size(), 1);  // Ask leaves answers it skipped
  batches_.clear();
  for (size_t r = 0; r < servers_.size(); ++r) batches_.emplace_back(options_.batch_bytes);
  in_flight_.assign(servers_.size(), 0);
  waiting_.resize(servers_.size());
  for (const proto::NodeInfo& server : link_.view().servers()) {
    if (server.rank() < 0 || server.rank() >= static_cast<int>(servers_.size())) {
      return Status::Malformed(fmt::format("the cluster view has server rank {}", server.rank()));
    }
    if (Status s = Connect(server); !s.ok()) return s;
    server_rank_[server.id()] = server.rank();
  }
  AttachTransports();
  link_.SetReporter([this, &heartbeat_clock](proto::Header& h) {
    proto::WorkerReport& r = *h.mutable_worker_report();
    report_.Fill(heartbeat_clock.load(), r);
    for (const auto& t : transports_) r.add_transports(t && t->attached() ? t->name() : "socket");
  });
  wake_in_.bind(fmt::format("inproc://client-wake-{}", link_.id()));
  wake_out_.connect(fmt::format("inproc://client-wake-{}", link_.id()));
  {
    std::lock_guard<std::mutex> lock(gate_->mu);
    gate_->io = this;
  }
  io_thread_ = std::thread([this] { IoLoop(); });
  return Status();
}

Status ClientIo::Connect(const proto::NodeInfo& server) {
  zmq::socket_t sock(ctx_, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::routing_id, NodeIdentity(link_.id()));
  sock.set(zmq::sockopt::sndhwm, 0);
  sock.set(zmq::sockopt::rcvhwm, 0);
  sock.set(zmq::sockopt::linger, 0);
  if (Status s = auth_.SecureClient(sock, server.public_key()); !s.ok()) {
    return Status(s.code(), fmt::format("server rank {}: {}", server.rank(), s.message()));
  }
  try {
    sock.connect(server.address());
  } catch (const zmq::error_t& e) {
    return Status::Malformed(fmt::format("server rank {} announced address '{}': {}", server.rank(),
                                         server.address(), e.what()));
  }
  servers_[server.rank()] = std::move(sock);
  ++sockets_changed_;
  dirty_[server.rank()] = 1;
  return Status();
}

void ClientIo::AttachTransports() {
  transports_.resize(servers_.size());
  // Under --auth=curve too: the headers stay on the authenticated socket, and the payloads go
  // where only this user can reach them (a 0600 segment; ptrace rights over this process).
  if (options_.link.enabled()) return;  // the link's timing is the socket's
  auto choices = TransportsFor(options_.transport);
  const proto::NodeInfo* self = link_.view().Node(link_.id());
  if (!choices.ok() || choices->empty() || self == nullptr) return;
  for (const proto::NodeInfo& server : link_.view().servers()) {
    if (server.host() != self->host() || !IsLocalEndpoint(server.address())) continue;
    const int rank = server.rank();
    TransportContext context{options_, report_, incarnation_, rank,
                             [this, rank](proto::Header h) { return Ask(rank, std::move(h)); }};
    std::string why;
    for (const TransportInfo* t : *choices) {
      auto opened = t->open(context);
      if (opened.ok()) {
        spdlog::debug("server rank {}: payloads through {}", rank, t->name);
        transports_[rank] = std::move(*opened);
        break;
      }
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", t->name, opened.status().ToString());
      // A server that does not answer at all (dying, restarting) is not asked again.
      if (opened.status().code() == StatusCode::kDeadlineExceeded) break;
    }
    if (!transports_[rank]) {
      spdlog::info("server rank {} is on this host; its payloads stay on the socket ({})", rank,
                   why);
    }
  }
}

StatusOr<proto::Header> ClientIo::Ask(int rank, proto::Header h) {
  using std::chrono::steady_clock;
  const auto deadline = steady_clock::now() + std::chrono::seconds(1);
  h.set_sender(link_.id());
  h.set_request_id(next_request_++);  // an answer to an earlier question is told apart
  const std::string what = proto::MsgType_Name(h.type());
  hetps::Send(servers_[rank], h, {});
  while (true) {
    // In slices, heartbeating between them: the scheduler must not take the wait for silence.
    link_.MaybeHeartbeat();
    zmq::pollitem_t item{servers_[rank].handle(), 0, ZMQ_POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return Status::DeadlineExceeded("no answer to " + what);
    if (zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(100))) == 0) continue;
    auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env || !env->status.ok()) return Status::Malformed("a malformed answer to " + what);
    const proto::Header& r = env->message.header;
    if (r.request_id() != h.request_id()) continue;
    if (r.type() != proto::ERROR) return r;
    Status s = StatusOf(r);
    if (s.code() != StatusCode::kUnregistered || steady_clock::now() > deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hetps::Send(servers_[rank], h, {});  // it did not know this worker yet: ask again
  }
}

bool ClientIo::Lends(int rank) const {
  for (const Lent& l : lent_) {
    if (l.target == rank) return true;
  }
  return false;
}

void ClientIo::Finish(uint64_t id, Pending& p, const Status& s, const proto::Header* h,
                      bool answered) {
  if (!p.via) {
    p.op->Complete(s, h);
    return;
  }
  p.via->Release(p.slot);
  // A reply from the server it was lent to means that server is done with the array; a
  // restarted server's reply says nothing about the process it replaced.
  const bool by_lender = answered && p.via == transports_[p.target] && p.via->attached();
  if (!p.slot.lent || by_lender || p.via->Released()) {
    p.op->Complete(s, h);
    return;
  }
  const int rank = p.target;
  const bool ask = !Lends(rank) && p.via == transports_[rank] && servers_[rank].handle() != nullptr;
  lent_.push_back({id, rank, p.op, s, p.via, p.slot.keep});
  if (ask) {  // a live server: asked to let go, and heard until it answers (revoking_)
    p.via->Detach();
    proto::Header revoke;
    revoke.set_type(proto::CMA_REVOKE);
    revoke.set_sender(link_.id());
    hetps::Send(servers_[rank], revoke, {});
    dirty_[rank] = 1;
  }
}

void ClientIo::ReleaseLent() {
  if (lent_.empty()) return;
  std::erase_if(lent_, [](Lent& l) {
    if (!l.via->Released()) return false;
    l.op->Complete(l.status);
    return true;
  });
  for (auto it = revoking_.begin(); it != revoking_.end();) {
    if (Lends(*it)) {
      ++it;
      continue;
    }
    servers_[*it].close();
    ++sockets_changed_;
    it = revoking_.erase(it);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!lent_.empty() && now - lent_logged_ > std::chrono::seconds(5)) {
    if (lent_logged_ != std::chrono::steady_clock::time_point{}) {
      spdlog::warn(
          "{} failed requests wait for their servers (rank {} first) to answer or exit: the "
          "server may still read or write the caller's arrays, which stay lent until then",
          lent_.size(), lent_.front().target);
    }
    lent_logged_ = now;
  }
}

// A server whose requests failed while it may still touch their arrays: its answer to
// CMA_REVOKE releases them all, and a late reply the one it answers.
void ClientIo::OnRevokingMessage(Envelope& env, int from) {
  if (IsBatch(env)) {
    std::vector<Envelope> parts;
    if (!Unbatch(env, parts).ok()) return;
    for (Envelope& part : parts) OnRevokingMessage(part, from);
    return;
  }
  if (!env.status.ok()) return;
  const proto::Header& h = env.message.header;
  if (h.type() == proto::CMA_REVOKE_REPLY) {
    for (Lent& l : lent_) {
      if (l.target == from) l.via->OnRevoked();
    }
    return;
  }
  std::erase_if(lent_, [&](Lent& l) {
    if (l.target != from || l.id != h.request_id()) return false;
    l.op->Complete(l.status);
    return true;
  });
}

namespace {

// Completes every request of `batch` with `s`: the caller's buffers are released first.
void Refuse(std::vector<Outgoing>& batch, const Status& s) {
  for (Outgoing& o : batch) {
    o.payload.clear();
    if (o.op) o.op->Complete(s);
  }
  batch.clear();
}

const Status& StoppedStatus() {
  static const Status s =
      Status::Aborted("the client has finished: no request is sent after Finish()");
  return s;
}

}  // namespace

void ClientIo::Submit(std::vector<Outgoing> batch) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopped_) return Refuse(batch, StoppedStatus());
  }
  std::unique_lock<std::mutex> io(gate_->mu, std::defer_lock);
  if (caller_io_) {
    for (Outgoing& o : batch) {
      if (o.op) o.op->gate = gate_;
    }
    // Sent from this thread unless another caller drives the sockets (it is woken and sends);
    // the I/O thread holds them only for a turn.
    if (gate_->leaders.load() == 0) {
      io.lock();
    } else {
      (void)io.try_lock();
    }
    if (io.owns_lock() && (gate_->io == nullptr || stopping_.load())) io.unlock();
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopped_) {  // Stop ended the I/O thread since the check above
      if (io.owns_lock()) io.unlock();
      return Refuse(batch, StoppedStatus());
    }
    const bool was_empty = queue_.empty();
    queue_.push_back(std::move(batch));
    if (!io.owns_lock() && was_empty) {
      (void)wake_out_.send(zmq::message_t(), zmq::send_flags::none);
    }
  }
  if (!io.owns_lock()) return;
  Turn(0, -1, nullptr);  // sends what is queued, in order
  LetGo();
}

void ClientIo::Nudge() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  (void)wake_out_.send(zmq::message_t(), zmq::send_flags::none);
}

bool ClientIo::LeadTurn() {
  if (stopping_.load()) return false;
  Turn(PollTimeoutMs(), gate_->done_fd, nullptr);
  return true;
}

bool ClientIo::Heard(int rank) const {
  return revoking_.contains(rank) || (!dead_servers_.contains(rank) && !recovering_.contains(rank));
}

bool ClientIo::AnyDirty() const {
  if (link_dirty_) return true;
  for (int r = 0; r < static_cast<int>(dirty_.size()); ++r) {
    if (dirty_[r] && Heard(r)) return true;  // a socket not heard is not looked at
  }
  return false;
}

void ClientIo::LetGo() {
  // Sends consume the signals of the sockets' descriptors: what arrived meanwhile is handled
  // here, so that each descriptor the I/O thread sleeps on signals whatever comes next.
  for (int turns = 0; turns < 16 && AnyDirty(); ++turns) Turn(0, -1, nullptr);
  if (!sleeping_) return;
  Watched(items_, item_ranks_);
  bool same =
      !AnyDirty() && sockets_changed_ == slept_changed_ && items_.size() == slept_on_.size();
  for (size_t i = 0; same && i < items_.size(); ++i) same = items_[i].socket == slept_on_[i];
  // The I/O thread takes over what is still coming in, and sockets that closed or opened.
  if (!same) Nudge();
}

StatusOr<proto::Header> ClientIo::Call(proto::Header h, int timeout_ms) {
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
    // Unbounded waits (a barrier, waiting to be selected for a round) end on a stop request.
    while (!op->cv.wait_for(lock, std::chrono::milliseconds(100), done)) {
      if (options_.stop != nullptr && options_.stop->load()) {
        return Status::Aborted("stopped while waiting for the scheduler");
      }
    }
  } else if (!op->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
    return Status::DeadlineExceeded(
        fmt::format("no answer from the scheduler in {} ms", timeout_ms));
  }
  if (!op->status.ok()) return op->status;
  return op->reply;
}

int ClientIo::AwaitServers(int timeout_ms) {
  // Under gate_->mu, which every turn holds while it changes what is pending.
  auto unanswered = [&] {
    if (gate_->io == nullptr || closed_) return false;
    {
      std::lock_guard<std::mutex> queued(queue_mu_);
      if (!queue_.empty()) return true;
    }
    return !parked_.empty() || std::any_of(waiting_.begin(), waiting_.end(), [](const auto& w) {
      return !w.empty();
    }) || std::any_of(pending_.begin(), pending_.end(), [](const auto& p) {
      return p.second.target >= 0;
    });
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    // Woken by the end of every turn (settled_), not by polling: the mutex is let go meanwhile.
    std::unique_lock<std::mutex> io(gate_->mu);
    settled_.wait_until(io, deadline, [&] { return !unanswered(); });
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::max(0, static_cast<int>(left.count()));
}

void ClientIo::Stop(int grace_ms) {
  if (io_thread_.joinable()) {
    stop_grace_ms_ = std::max(0, grace_ms);
    stopping_ = true;
    io_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(gate_->mu);
    gate_->io = nullptr;  // a ticket waited on later does not lead
  }
  settled_.notify_all();
  // What was submitted after the loop's last look fails now, as whatever comes later will.
  std::vector<std::vector<Outgoing>> left;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopped_ = true;
    left.swap(queue_);
  }
  for (std::vector<Outgoing>& batch : left) Refuse(batch, StoppedStatus());
}

void ClientIo::IoLoop() {
  std::optional<std::chrono::steady_clock::time_point> stop_deadline;
  std::unique_lock<std::mutex> io(gate_->mu);
  while (true) {
    if (stopping_.load()) {
      SendQueued();  // anything submitted before the stop still goes out (or fails)
      // The grace is for the servers' answers (updates in flight); what still waits on the
      // scheduler (a wait abandoned on a stop request) ends now: Stop comes after Finish's
      // LEAVE was answered.
      FailPending(kToScheduler, Status::Aborted("the client stopped"));
      // Never before the servers let go of every array lent to them.
      if (lent_.empty() && ((pending_.empty() && parked_.empty()) || closed_)) break;
      auto now = std::chrono::steady_clock::now();
      if (!stop_deadline) stop_deadline = now + std::chrono::milliseconds(stop_grace_ms_.load());
      if (now > *stop_deadline && !closed_) {
        FailAll(Status::Aborted("the client stopped before the servers answered"));
        if (lent_.empty()) break;
      }
    }
    // Sleeps without the gate (a caller may drive meanwhile) unless a socket needs a look.
    Turn(AnyDirty() ? 0 : PollTimeoutMs(), -1, &io);
  }
}

void ClientIo::Watched(std::vector<zmq::pollitem_t>& items, std::vector<int>& ranks) {
  items.assign(
      {{wake_in_.handle(), 0, ZMQ_POLLIN, 0}, {link_.socket().handle(), 0, ZMQ_POLLIN, 0}});
  ranks.clear();
  for (int r = 0; r < static_cast<int>(servers_.size()); ++r) {
    if (!Heard(r)) continue;
    items.push_back({servers_[r].handle(), 0, ZMQ_POLLIN, 0});
    ranks.push_back(r);
  }
}

// ZeroMQ's descriptors signal edges: a socket's descriptor becomes readable when something
// arrives after the socket was last found empty, and any operation on the socket may consume
// that signal. So a turn looks at (receives from until empty) the sockets whose descriptor woke
// it and the sockets it sent on (dirty_), and sleeps only when none is dirty. Polling the
// descriptors directly, rather than with zmq::poll (which checks every socket's ZMQ_EVENTS, a
// system call or two each, before and after it sleeps), took the client's system calls per
// 1 MB push from about 47 to 26 (docs/benchmarks.md).
void ClientIo::Turn(int timeout_ms, int extra_fd, std::unique_lock<std::mutex>* unlocked) {
  SendQueued();
  FlushBatches();
  Watched(items_, item_ranks_);
  look_.assign(items_.size(), 0);
  if (timeout_ms > 0 && !AnyDirty()) {
    // The I/O thread sleeps without the gate: what it sleeps on is its own (a caller may run
    // a turn meanwhile, with items_ and fds_).
    std::vector<pollfd>& fds = unlocked != nullptr ? sleep_fds_ : fds_;
    std::vector<void*>& on = unlocked != nullptr ? slept_on_ : polled_;
    fds.clear();
    on.clear();
    for (const zmq::pollitem_t& i : items_) {
      fds.push_back({zmq::socket_ref(zmq::from_handle, i.socket).get(zmq::sockopt::fd), POLLIN, 0});
      on.push_back(i.socket);
    }
    if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
    if (unlocked != nullptr) {
      sleeping_ = true;
      slept_changed_ = sockets_changed_;
      unlocked->unlock();
    }
    (void)::poll(fds.data(), fds.size(), timeout_ms);
    if (unlocked != nullptr) {
      unlocked->lock();
      sleeping_ = false;
    }
    if (extra_fd >= 0 && (fds.back().revents & POLLIN)) {
      uint64_t count = 0;
      (void)!read(extra_fd, &count, sizeof(count));
    }
    // A caller may have driven while this thread slept: the sockets are looked up again.
    std::vector<void*>& woke = woke_;
    woke.clear();
    for (size_t i = 0; i < on.size(); ++i) {
      if (fds[i].revents != 0) woke.push_back(on[i]);
    }
    Watched(items_, item_ranks_);
    look_.assign(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i) {
      look_[i] = std::find(woke.begin(), woke.end(), items_[i].socket) != woke.end();
    }
  }
  // Besides what signalled, every socket sent on since it was last found empty.
  look_[1] = look_[1] || link_dirty_;
  for (size_t i = 2; i < items_.size(); ++i) look_[i] = look_[i] || dirty_[item_ranks_[i - 2]];
  if (link_.MaybeHeartbeat()) look_[1] = link_dirty_ = true;
  if (look_[0]) {
    zmq::message_t m;
    while (wake_in_.recv(m, zmq::recv_flags::dontwait)) {
    }
  }
  SendQueued();
  ReleaseDue();
  for (size_t i = 2; i < items_.size(); ++i) {
    if (!look_[i]) continue;
    const int rank = item_ranks_[i - 2];
    while (true) {
      if (revoking_.contains(rank)) {
        auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
        if (!env) {
          dirty_[rank] = 0;
          break;
        }
        OnRevokingMessage(*env, rank);
        continue;
      }
      if (dead_servers_.contains(rank) || recovering_.contains(rank)) break;
      auto env = Receive(servers_[rank], zmq::recv_flags::dontwait, /*routed=*/false);
      if (!env) {
        dirty_[rank] = 0;  // found empty after every send so far
        break;
      }
      if (shaper_) {  // handed over when the emulated link would have delivered it
        size_t bytes = env->message.header.ByteSizeLong();
        for (const zmq::message_t& m : env->message.payload) bytes += m.size();
        inbound_.push_back({shaper_->Down(bytes, Now()), rank, {}, {}, std::move(*env)});
        continue;
      }
      OnReply(*env, rank);
    }
  }
  ReleaseDue();
  while (look_[1]) {
    auto env = Receive(link_.socket(), zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env) {
      link_dirty_ = false;
      break;
    }
    link_.Heard();
    OnControl(*env);
  }
  ExpireRecoveries();
  ReleaseLent();
  if (!closed_ && link_.SchedulerLost()) {
    spdlog::error("no word from the scheduler for {} ms; failing every request",
                  link_.view().proto().heartbeat_timeout_ms());
    FailAll(Status::Unavailable("lost the scheduler"));
  }
  FlushBatches();
  settled_.notify_all();  // AwaitServers looks again at what is unanswered
}

void ClientIo::SendQueued() {
  std::vector<std::vector<Outgoing>> batches;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    batches.swap(queue_);
  }
  for (std::vector<Outgoing>& batch : batches) {
    for (Outgoing& o : batch) Dispatch(o);
  }
}

void ClientIo::Dispatch(Outgoing& o) {
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
  if (o.target >= 0 && recovering_.contains(o.target)) {  // sent once the server is back
    parked_[o.target].push_back(std::move(o));
    return;
  }
  const int64_t bytes = o.target >= 0 ? WindowBytes(o) : 0;
  if (o.target >= 0) {
    // In order behind what already waits (a clock must not pass the pushes before it).
    const int64_t window = options_.max_in_flight_bytes;
    if (window > 0 && (!waiting_[o.target].empty() ||
                       (in_flight_[o.target] > 0 && in_flight_[o.target] + bytes > window))) {
      waiting_[o.target].push_back(std::move(o));
      return;
    }
  }
  Transmit(o, bytes);
}

void ClientIo::ReleaseWaiting(int rank) {
  std::deque<Outgoing>& waiting = waiting_[rank];
  while (!waiting.empty()) {
    const int64_t bytes = WindowBytes(waiting.front());
    if (in_flight_[rank] > 0 && in_flight_[rank] + bytes > options_.max_in_flight_bytes) return;
    Outgoing next = std::move(waiting.front());
    waiting.pop_front();
    Transmit(next, bytes);
  }
}

void ClientIo::Transmit(Outgoing& o, int64_t window_bytes) {
  const uint64_t id = next_request_++;
  o.header.set_request_id(id);
  o.header.set_sender(link_.id());
  if (o.header.type() == proto::PUSH || o.header.type() == proto::INIT) {
    // Numbered here, in the order they leave on the server's one socket, so the server sees
    // each partition's numbers in order even when several threads push at once.
    o.header.set_incarnation(incarnation_);
    o.header.set_seq(++update_seq_[o.header.partition()]);
  }
  Pending& p = pending_[id];
  p.target = o.target;
  p.op = o.op;
  p.dst = o.dst;
  p.dst_len = o.dst_len;
  p.clock = o.header.clock();
  p.type = o.header.type();
  p.partition = o.header.partition();
  if (o.target >= 0) {
    p.window_bytes = window_bytes;
    in_flight_[o.target] += window_bytes;
  }
  if (o.target == kToScheduler || (o.target >= 0 && options_.server_recovery_timeout_ms > 0)) {
    p.header = o.header;
    p.src = o.src;
    p.src_bytes = o.src_bytes;
    p.encoded = o.encoded;
  }
  if (o.target >= 0 && transports_[o.target] && transports_[o.target]->attached()) {
    transports_[o.target]->Prepare(o, p.slot);
    if (p.slot.length > 0) p.via = transports_[o.target];
  }
  if (o.target == kToScheduler) {
    hetps::Send(link_.socket(), o.header, std::move(o.payload));
    link_dirty_ = true;
  } else {
    report_.OnRequest();
    SendToServer(o.target, std::move(o.header), std::move(o.payload));
  }
}

// A server's reply is untrusted input, exactly as a request is to a server: its type must be
// the one the request is owed (or ERROR), and a data reply must name the partition asked about.
// Only then may anything index per-partition state or write to the caller's buffer.
Status ClientIo::CheckReply(const proto::Header& h, const Pending& p, int from) {
  if (h.type() == proto::ERROR) return Status();
  if (h.type() != ReplyTypeOf(p.type)) {
    return Status::Malformed(fmt::format("server rank {} answered {} with {}", from,
                                         proto::MsgType_Name(p.type),
                                         proto::MsgType_Name(h.type())));
  }
  if (p.type != proto::CLOCK && h.partition() != p.partition) {
    return Status::Malformed(fmt::format(
        "server rank {} answered a request for partition {} with a reply for partition {}", from,
        p.partition, h.partition()));
  }
  if (p.type == proto::PULL && h.min_clock() < 0) {
    return Status::Malformed(
        fmt::format("server rank {} reported a negative min_clock {}", from, h.min_clock()));
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

void ClientIo::OnReply(Envelope& env, int from) {
  if (IsBatch(env)) {  // the answers a server gave at once to parts of a batch
    std::vector<Envelope> parts;
    if (Status s = Unbatch(env, parts); !s.ok()) {
      spdlog::warn("malformed batch of replies from server rank {}: {}", from, s.ToString());
      return;
    }
    for (Envelope& part : parts) OnReply(part, from);
    return;
  }
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
  Pending p = std::move(it->second);
  pending_.erase(it);
  in_flight_[from] -= p.window_bytes;
  Status s = CheckReply(h, p, from);
  if (!s.ok()) {
    spdlog::warn("{}", s.ToString());
    Finish(h.request_id(), p, s, nullptr, /*answered=*/true);
    ReleaseWaiting(from);
    return;
  }
  s = StatusOf(h);
  if (h.dropped()) report_.OnDropped();
  if (s.ok() && h.type() == proto::PUSH_REPLY && !h.dropped()) report_.OnPushAcked(h.staleness());
  if (s.ok() && h.type() == proto::PULL_REPLY) s = AcceptPull(h, env.message, p, from);
  // Only a clock's reply says something to its operation (where to continue).
  Finish(h.request_id(), p, s, p.type == proto::CLOCK ? &h : nullptr, /*answered=*/true);
  ReleaseWaiting(from);
}

// Checks a pull reply's codec and size, then writes its values to the caller's buffer.
Status ClientIo::AcceptPull(const proto::Header& h, const Message& message, const Pending& p,
                            int from) {
  const size_t want = static_cast<size_t>(p.dst_len) * sizeof(float);
  if (h.codec() != pulls_.codec) {
    return Status::Malformed(
        fmt::format("server rank {} answered partition {} in codec '{}', not '{}'", from,
                    p.partition, h.codec(), pulls_.codec));
  }
  if (h.shm_length() != 0 || h.cma_length() != 0) {  // through the co-located transport
    if (!p.via || p.via != transports_[from] || !message.payload.empty()) {
      return Status::SizeMismatch(
          fmt::format("server rank {} answered partition {} through a transport it was not given",
                      from, p.partition));
    }
    if (Status s = p.via->AcceptPull(h, p.slot, p.dst, want); !s.ok()) {
      return Status(s.code(), fmt::format("server rank {} answered partition {} through {}: {}",
                                          from, p.partition, p.via->name(), s.message()));
    }
    pulls_.base_versions[p.partition].store(h.version(), std::memory_order_relaxed);
    report_.OnRead(static_cast<int64_t>(want), ReadStaleness(p.clock, h.min_clock()));
    return Status();
  }
  if (message.payload.size() != 1 || (pulls_.codec.empty() && message.payload[0].size() != want)) {
    return Status::SizeMismatch(
        fmt::format("server rank {} answered partition {} with a wrong size", from, p.partition));
  }
  const zmq::message_t& frame = message.payload[0];
  if (!pulls_.codec.empty()) {
    Status s = pulls_.decoder->Decode(static_cast<const uint8_t*>(frame.data()), frame.size(),
                                      p.dst_len, {}, p.dst);
    if (!s.ok()) return s;
  } else {
    std::memcpy(p.dst, frame.data(), want);
  }
  pulls_.base_versions[p.partition].store(h.version(), std::memory_order_relaxed);
  report_.OnRead(static_cast<int64_t>(frame.size()), ReadStaleness(p.clock, h.min_clock()));
  return Status();
}

void ClientIo::OnControl(Envelope& env) {
  if (!env.status.ok()) return;
  const proto::Header& h = env.message.header;
  if (link_.SchedulerRestarted(h)) {
    // A restarted scheduler knows this node (its data dir) but not what it was asked (a
    // barrier, a declaration): ask again, under the same request ids.
    for (const auto& [id, p] : pending_) {
      if (p.target == kToScheduler) {
        hetps::Send(link_.socket(), *p.header, {});
        link_dirty_ = true;
      }
    }
  }
  switch (h.type()) {
    case proto::NODE_DEAD: {
      auto server = server_rank_.find(h.node());
      if (server != server_rank_.end()) OnServerDead(server->second);
      return;
    }
    case proto::SERVER_BACK:
      OnServerBack(h);
      return;
    case proto::SHUTDOWN:
      spdlog::warn("the scheduler shut the cluster down");
      FailAll(Status::Aborted("the cluster was shut down"));
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

void ClientIo::FailPending(int target, const Status& s) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.target == target) {
      Finish(it->first, it->second, s, nullptr, /*answered=*/false);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  if (target < 0) return;
  in_flight_[target] = 0;
  for (Outgoing& o : waiting_[target]) {
    o.payload.clear();  // releases the caller's buffers
    o.op->Complete(s);
  }
  waiting_[target].clear();
}

void ClientIo::OnServerDead(int rank) {
  DropBatch(rank);
  revoking_.erase(rank);   // its exit, not its answer, releases what it was lent
  servers_[rank].close();  // drops queued frames, releasing the caller's buffers
  ++sockets_changed_;
  // A restarted server has not attached: what goes to it goes on its socket.
  if (transports_[rank]) transports_[rank]->Detach();
  if (options_.server_recovery_timeout_ms <= 0) {
    spdlog::error("server rank {} is dead; its requests fail", rank);
    dead_servers_.insert(rank);
    FailPending(rank, Status::Unavailable(fmt::format("server rank {} died", rank)));
    return;
  }
  spdlog::warn("server rank {} is dead; its requests wait up to {} ms for it to come back", rank,
               options_.server_recovery_timeout_ms);
  recovering_[rank] = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(options_.server_recovery_timeout_ms);
}

// The restarted server restored its shards: everything it did not answer goes again, in the
// order it was first sent (it applies each numbered update once), then what waited meanwhile.
void ClientIo::OnServerBack(const proto::Header& h) {
  const proto::NodeInfo* node = nullptr;
  for (const proto::NodeInfo& n : h.view().nodes()) {
    if (n.id() == h.node() && n.role() == proto::SERVER) node = &n;
  }
  if (node == nullptr || node->rank() < 0 || node->rank() >= static_cast<int>(servers_.size())) {
    spdlog::warn("ignoring a malformed SERVER_BACK for node {}", h.node());
    return;
  }
  const int rank = node->rank();
  server_rank_[node->id()] = rank;
  if (!recovering_.erase(rank) && !dead_servers_.erase(rank)) return;  // never lost it
  if (Status s = Connect(*node); !s.ok()) {
    spdlog::error("cannot reconnect to the restarted server: {}", s.ToString());
    dead_servers_.insert(rank);
    FailPending(rank, Status::Unavailable(s.message()));
    return;
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) {
    if (p.target == rank) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    Pending& p = pending_[id];
    std::vector<zmq::message_t> payload;
    if (p.encoded) {
      payload.push_back(SharedFrame(p.encoded));
    } else if (p.src != nullptr) {
      p.op->Expect();  // the caller's buffer is lent once more
      payload.emplace_back(const_cast<float*>(p.src), p.src_bytes, ReleaseCallerBuffer,
                           new OpPtr(p.op));
    }
    SendToServer(rank, proto::Header(*p.header), std::move(payload));  // kept for another restart
  }
  spdlog::info("server rank {} is back at {}; resent {} unanswered requests", rank, node->address(),
               ids.size());
  std::vector<Outgoing> parked = std::move(parked_[rank]);
  parked_.erase(rank);
  for (Outgoing& o : parked) Dispatch(o);
}

void ClientIo::ExpireRecoveries() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = recovering_.begin(); it != recovering_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const int rank = it->first;
    it = recovering_.erase(it);
    const Status s =
        Status::Unavailable(fmt::format("server rank {} died and did not come back in {} ms", rank,
                                        options_.server_recovery_timeout_ms));
    spdlog::error("{}", s.message());
    dead_servers_.insert(rank);
    FailPending(rank, s);
    for (Outgoing& o : parked_[rank]) {
      o.payload.clear();
      o.op->Complete(s);
    }
    parked_.erase(rank);
  }
}

void ClientIo::FailAll(const Status& s) {
  closed_ = s;
  outbound_.clear();  // releases the caller's buffers
  inbound_.clear();
  // Frames queued to a server are dropped and the caller's buffers released, so no ticket
  // waits for a send that will never happen.
  for (int rank = 0; rank < static_cast<int>(servers_.size()); ++rank) DropBatch(rank);
  for (auto& [id, p] : pending_) Finish(id, p, s, nullptr, /*answered=*/false);
  pending_.clear();
  for (int rank = 0; rank < static_cast<int>(servers_.size()); ++rank) {
    if (!dead_servers_.insert(rank).second) continue;
    if (Lends(rank)) {
      revoking_.insert(rank);  // heard until it answers CMA_REVOKE
    } else {
      servers_[rank].close();
      ++sockets_changed_;
    }
  }
  recovering_.clear();
  for (size_t rank = 0; rank < waiting_.size(); ++rank) {
    in_flight_[rank] = 0;
    for (Outgoing& o : waiting_[rank]) {
      o.payload.clear();
      o.op->Complete(s);
    }
    waiting_[rank].clear();
  }
  for (auto& [rank, parked] : parked_) {
    for (Outgoing& o : parked) {
      o.payload.clear();
      o.op->Complete(s);
    }
  }
  parked_.clear();
}

}  // namespace hetps
