// ClientIo's life and its API to the calling threads: joining, connecting and attaching the
// co-located transports, submitting requests, control calls, and stopping. The turn that drives
// the sockets is in client_io_turn.cc, the request table in client_io_requests.cc, what a dead
// or restarted server's requests become in client_io_recovery.cc.
#include "worker/client_io.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "common/dial.h"
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

namespace {

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

// Completes every request of `batch` with `s`.
void Refuse(std::vector<Outgoing>& batch, const Status& s) {
  for (Outgoing& o : batch) FailOutgoing(o, s);
  batch.clear();
}

const Status& StoppedStatus() {
  static const Status s =
      Status::Aborted("the client has finished: no request is sent after Finish()");
  return s;
}

}  // namespace

void FailOutgoing(Outgoing& o, const Status& s) {
  o.payload.clear();  // releases the caller's buffers (their callbacks complete the op) first
  if (o.op) o.op->Complete(s);
}

ClientIo::ClientIo(const ClientOptions& options, Auth auth, ClientReport& report, PullState& pulls)
    : options_(options),
      auth_(std::move(auth)),
      report_(report),
      pulls_(pulls),
      link_(ctx_, options.scheduler, proto::WORKER, "", options.heartbeat_interval_ms, auth_),
      wake_in_(ctx_, zmq::socket_type::pull),
      wake_out_(ctx_, zmq::socket_type::push),
      incarnation_(DrawIncarnation()) {
  if (options_.link.enabled() && !options_.link.outside) delayed_.emplace(options_.link);
  // An emulated link delays sends and replies on the I/O thread's clock: it keeps them.
  caller_io_ = options_.caller_io && !delayed_;
}

ClientIo::~ClientIo() { Stop(); }

Status ClientIo::Start(const std::atomic<int64_t>& heartbeat_clock) {
  clock_ = &heartbeat_clock;
  static const std::atomic<bool> never{false};
  const std::atomic<bool>& stop = options_.stop ? *options_.stop : never;
  if (options_.rank >= 0) link_.registration().set_rank(options_.rank);
  link_.registration().set_virtual_clock(options_.virtual_clock);
  if (Status s = link_.Join(stop, options_.join_timeout_ms); !s.ok()) return s;
  SetLogNode("worker", link_.id());
  servers_.resize(link_.view().servers().size());
  num_servers_.store(static_cast<int>(servers_.size()), std::memory_order_relaxed);
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
  if (Status s = ConnectTier(); !s.ok()) return s;
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
  auto sock = Dial(ctx_, link_.id(), server.address(), auth_, server.public_key());
  if (!sock.ok()) {
    return Status(sock.status().code(),
                  fmt::format("server rank {}: {}", server.rank(), sock.status().message()));
  }
  servers_[server.rank()] = std::move(*sock);
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

void ClientIo::Submit(std::vector<Outgoing> batch) {
  if (const double t = turn_time_.load(); !std::isnan(t)) {
    for (Outgoing& o : batch) {
      if (o.target >= 0 || o.target == kEveryServer) o.header.set_virtual_time(t);
    }
  }
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
  // Sends what is queued, in order, and handles what is already there. Sending alone and
  // draining only the sockets sent on measured 0.9x the pushes per second of this whole turn
  // (hetps-bench pushpull --mb 1 --only push, six alternating runs).
  Turn(0, -1, nullptr);
  LetGo();
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
    auto any = [](const auto& queues) {
      return std::any_of(queues.begin(), queues.end(), [](const auto& q) { return !q.empty(); });
    };
    return !parked_.empty() || any(waiting_) || any(tier_held_) || any(tier_failed_) ||
           std::any_of(pending_.begin(), pending_.end(),
                       [](const auto& p) { return p.second.target >= 0; });
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

}  // namespace hetps
