// ClientIo's request table: batching and sending requests (through the emulated link when there
// is one), the per-server in-flight window, exactly-once numbering, checking each reply against
// its request and completing it, and failing what can no longer be answered.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "worker/client_io.h"

namespace hetps {

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

}  // namespace

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
  if (options_.batch_bytes > 0 && data && bytes < options_.batch_bytes &&
      rank < static_cast<int>(tier_pending_.size())) {  // an aggregator takes no batches
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
  if (delayed_) return delayed_->HoldRequest(rank, header, std::move(payload));
  hetps::Send(servers_[rank], header, std::move(payload));
  dirty_[rank] = 1;
}

// Sends the requests and hands over the replies whose time on the emulated link has come; those
// of a server that died meanwhile are dropped (their requests failed or wait for its return).
void ClientIo::ReleaseDue() {
  if (!delayed_) return;
  auto gone = [&](int rank) { return dead_servers_.contains(rank) || recovering_.contains(rank); };
  delayed_->ReleaseDue(
      [&](int rank, const proto::Header& header, std::vector<zmq::message_t> payload) {
        if (gone(rank)) return;
        hetps::Send(servers_[rank], header, std::move(payload));
        dirty_[rank] = 1;
      },
      [&](int rank, Envelope& reply) {
        if (!gone(rank)) OnReply(reply, rank);
      });
}

int ClientIo::PollTimeoutMs() const { return delayed_ ? delayed_->TimeoutMs(100) : 100; }

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
    FailOutgoing(o, *closed_);
    return;
  }
  if (o.target == kEveryServer) return DispatchEveryServer(o);
  Route(o);  // to the rank the newest shard map places its partition on
  if (o.target >= 0 && retired_.contains(o.target) && o.header.type() == proto::CLOCK) {
    o.op->Complete(Status());  // a retired rank holds no clock back
    return;
  }
  if (o.target >= 0 && dead_servers_.contains(o.target)) {
    FailOutgoing(o, Status::Unavailable(fmt::format("server rank {} is dead", o.target)));
    return;
  }
  if (TierHolds(o)) return;  // behind pushes at the aggregator (client_io_tier.cc)
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
    // A push the aggregator gave back keeps its number (client_io_tier.cc).
    if (o.header.seq() == 0) o.header.set_seq(++update_seq_[o.header.partition()]);
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
  if (o.target >= 0 && o.target == tier_) {
    p.tier_rank = o.header.rank();
    ++tier_pending_[p.tier_rank];
  }
  // Kept to send it again: to a restarted server, past the aggregator, or to a partition's new
  // rank (live re-sharding, which any cluster may do).
  if (o.target == kToScheduler || p.tier_rank >= 0 || o.target >= 0) {
    p.header = o.header;
    p.src = o.src;
    p.src_bytes = o.src_bytes;
    p.encoded = o.encoded;
  }
  if (o.target >= 0 && !o.frames_only && transports_[o.target] &&
      transports_[o.target]->attached()) {
    transports_[o.target]->Prepare(o, p.slot);
    if (p.slot.length > 0) p.via = transports_[o.target];
  }
  if (o.target == kToScheduler) {
    hetps::Send(link_.socket(), o.header, std::move(o.payload));
    link_dirty_ = true;
  } else if (p.tier_rank >= 0 && Streams(o)) {
    report_.OnRequest();
    StartStream(id, o);
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
  if (h.type() == proto::PUSH_REPLY && h.has_chunk()) return OnChunkSummed(h, from);
  auto it = pending_.find(h.request_id());
  if (it == pending_.end() || it->second.target != from) {
    spdlog::warn("reply {} from server rank {} matches no request", h.request_id(), from);
    return;
  }
  if (h.type() == proto::PARKED) {  // virtual time: the reply comes later; the turn may end
    Pending& parked = it->second;
    if ((parked.type != proto::PULL && parked.type != proto::CLOCK) || parked.parked) {
      spdlog::warn("server rank {} said it parked request {} ({}), which it may not", from,
                   h.request_id(), proto::MsgType_Name(parked.type));
      return;
    }
    parked.parked = true;
    parked.op->Note(h, /*notice=*/true, /*was_parked=*/false);
    return;
  }
  Pending p = std::move(it->second);
  pending_.erase(it);
  streams_.erase(h.request_id());  // a streamed push's answer: its chunks all went
  in_flight_[from] -= p.window_bytes;
  Status s = CheckReply(h, p, from);
  if (p.tier_rank >= 0 && (!s.ok() || !StatusOf(h).ok())) {  // sent directly instead
    OnTierAnswer(p, s.ok() ? StatusOf(h) : s);
    ReleaseWaiting(from);
    return;
  }
  if (!s.ok()) {
    spdlog::warn("{}", s.ToString());
    Finish(h.request_id(), p, s, nullptr, /*answered=*/true);
    ReleaseWaiting(from);
    return;
  }
  if (h.type() == proto::ERROR && h.moved_epoch() > 0 && p.header) {
    OnMovedReply(p, h.moved_epoch());  // its partition serves from another rank now
    ReleaseWaiting(from);
    return;
  }
  if (p.parked || h.has_virtual_time()) p.op->Note(h, /*notice=*/false, p.parked);
  s = StatusOf(h);
  if (h.dropped()) report_.OnDropped();
  if (s.ok() && h.type() == proto::PUSH_REPLY && !h.dropped()) report_.OnPushAcked(h.staleness());
  if (s.ok() && h.type() == proto::PULL_REPLY) s = AcceptPull(h, env.message, p, from);
  // Only a clock's reply says something to its operation (where to continue).
  Finish(h.request_id(), p, s, p.type == proto::CLOCK ? &h : nullptr, /*answered=*/true);
  if (p.tier_rank >= 0) OnTierAnswer(p, Status());
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

void ClientIo::FailPending(int target, const Status& s) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.target == target) {
      Finish(it->first, it->second, s, nullptr, /*answered=*/false);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  DropStreams();
  if (target < 0) return;
  in_flight_[target] = 0;
  for (Outgoing& o : waiting_[target]) {
    FailOutgoing(o, s);
  }
  waiting_[target].clear();
}

void ClientIo::FailAll(const Status& s) {
  closed_ = s;
  if (delayed_) delayed_->Clear();  // releases the caller's buffers
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
      FailOutgoing(o, s);
    }
    waiting_[rank].clear();
  }
  for (auto& [rank, parked] : parked_) {
    for (Outgoing& o : parked) {
      FailOutgoing(o, s);
    }
  }
  parked_.clear();
  for (auto& held : tier_held_) {
    for (Outgoing& o : held) FailOutgoing(o, s);
    held.clear();
  }
  for (auto& failed : tier_failed_) {
    for (auto& [id, o] : failed) FailOutgoing(o, s);
    failed.clear();
  }
  std::fill(tier_pending_.begin(), tier_pending_.end(), 0);
  streams_.clear();
}

}  // namespace hetps
