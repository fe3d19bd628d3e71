// ClientIo: a worker's connection to the cluster and the thread that drives it. It joins through
// the scheduler, connects to every server, and runs one I/O thread that sends what the API
// threads submit, heartbeats (carrying the ClientReport), and matches each reply to its request.
// Every reply is untrusted input: its type, partition, clock and size are checked against the
// request before anything is written to the caller's buffer or to per-partition state. A dead
// server fails its requests with UNAVAILABLE; a cluster shutdown fails everything with ABORTED.
//
// Thread-safety: Submit and Call may be called from any thread; everything else about the
// sockets and the pending requests belongs to whoever holds the IoGate's mutex: the I/O thread,
// or with options.caller_io a calling thread that sends its own requests or waits for its own
// replies (so an operation costs no thread hand-off beyond ZeroMQ's own).
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <zmq.hpp>

#include "common/batch.h"
#include "common/cluster_view.h"
#include "common/compress/codec.h"
#include "common/message.h"
#include "common/scheduler_link.h"
#include "common/shard_map.h"
#include "hetps/client.h"
#include "worker/client_report.h"
#include "worker/delayed_link.h"
#include "worker/transport.h"

namespace hetps {

class ClientIo;

// Who drives a client's sockets (ClientOptions::caller_io): whoever holds `mu`. That is the I/O
// thread while it handles what is ready, a calling thread while it sends its own requests
// (ClientIo::Submit), or a thread that waits on a ticket and handles the replies itself
// (LeadUntilDone). The I/O thread sleeps without it. ZeroMQ sockets may change threads across a
// full memory barrier, which the mutex is.
struct IoGate {
  std::mutex mu;
  ClientIo* io = nullptr;       // null once the I/O thread stopped; guarded by mu
  std::atomic<int> leaders{0};  // threads in LeadUntilDone
  int done_fd = -1;             // eventfd: an operation a leader waits on completed elsewhere
  IoGate();
  ~IoGate();
  IoGate(const IoGate&) = delete;
  IoGate& operator=(const IoGate&) = delete;
};

// Completion state of one operation: it is done when `remaining` reaches zero, counting one per
// outstanding reply and one per caller buffer ZeroMQ still holds.
struct Ticket::State {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  Status status;
  proto::Header reply;    // the last reply header (control operations read it)
  int64_t max_clock = 0;  // the largest clock any reply named (CLOCK: where to continue)
  // Runs once, under `mu`, when the operation completes without error, before any waiter
  // wakes (PullRows spreads the rows it fetched over the caller's positions).
  std::function<void()> then;
  // Set by ClientIo::Submit when callers drive the I/O: Wait() may lead (LeadUntilDone).
  std::shared_ptr<IoGate> gate;
  bool led = false;  // a thread waiting on it is driving the sockets (guarded by mu)

  // Virtual time (Client::EndTurn): the operation's requests a server parked and has not
  // answered yet, the latest virtual time a reply or notice carried, and the workers they said
  // were released.
  int parked = 0;
  double virtual_time = -std::numeric_limits<double>::infinity();
  std::vector<int32_t> unparked;

  explicit State(int n) : remaining(n) {}
  void Complete(const Status& s, const proto::Header* header = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok() && status.ok()) status = s;
    if (header != nullptr) {
      reply = *header;
      max_clock = std::max(max_clock, header->clock());
    }
    if (--remaining == 0) {
      if (then && status.ok()) then();
      then = nullptr;
      cv.notify_all();
      // The thread driving the sockets for this operation sleeps in their poll: wake it.
      if (led) WakeLeader();
    } else if (remaining == parked) {
      cv.notify_all();  // settled: what is left waits at servers (Client::EndTurn)
    }
  }
  // A server parked one of the requests (PARKED), or answered one under virtual time
  // (`was_parked`: one it had parked): notes the reply's virtual time and released workers.
  void Note(const proto::Header& h, bool notice, bool was_parked) {
    std::lock_guard<std::mutex> lock(mu);
    if (notice) ++parked;
    if (was_parked) --parked;
    if (h.has_virtual_time()) virtual_time = std::max(virtual_time, h.virtual_time());
    for (int32_t w : h.virtual_turn().unparked()) unparked.push_back(w);
    if (notice && remaining == parked) cv.notify_all();
  }
  void WakeLeader() const;
  // One more completion to wait for (a resent request's buffer release).
  void Expect() {
    std::lock_guard<std::mutex> lock(mu);
    ++remaining;
  }
};

using OpPtr = std::shared_ptr<Ticket::State>;

// A ticket state already completed with `s`.
OpPtr FailedOp(const Status& s);
// ZeroMQ calls this (from its I/O thread) when it no longer needs a caller's buffer; `hint` is
// a heap-allocated OpPtr whose operation counts the release.
void ReleaseCallerBuffer(void* data, void* hint);
// Ticket::Wait: while no other thread drives op's client, this one does (IoGate) until op is
// done or the client stops; the caller then waits on op's condition variable (for what the
// driving thread completes).
void LeadUntilDone(Ticket::State& op);

constexpr int kToScheduler = -1;
constexpr int kEveryServer = -2;    // a CLOCK: to every rank that serves (ClientIo expands it)
constexpr int kStopGraceMs = 5000;  // how long a stop waits for unanswered requests

// A request on its way to a server (rank >= 0) or the scheduler.
struct Outgoing {
  int target = kToScheduler;
  proto::Header header;
  std::vector<zmq::message_t> payload;
  OpPtr op;
  float* dst = nullptr;  // PULL: where the partition's values go
  int64_t dst_len = 0;
  // What the payload frame holds, to send it again to a restarted server: the caller's floats
  // (valid until the operation completes) or encoded bytes.
  const float* src = nullptr;
  size_t src_bytes = 0;
  std::shared_ptr<const std::vector<uint8_t>> encoded;
  bool frames_only = false;  // never through a co-located transport (table requests)
};

// Completes `o`'s operation with `s`, releasing the caller's buffers first.
void FailOutgoing(Outgoing& o, const Status& s);

// What a pull reply must match and where its version goes; set before the first pull.
struct PullState {
  std::string codec;  // empty: raw float32
  std::shared_ptr<const compress::Codec> decoder;
  // Per partition: the version of its last pulled values, the base a later push was computed
  // from. Written by the I/O thread, read by pushing threads.
  std::unique_ptr<std::atomic<int64_t>[]> base_versions;
};

class ClientIo {
 public:
  // `report` and `pulls` outlive this object.
  // `auth`: what LoadAuth gave for options.auth (the io keeps a copy).
  ClientIo(const ClientOptions& options, Auth auth, ClientReport& report, PullState& pulls);
  ~ClientIo();  // Stop()
  ClientIo(const ClientIo&) = delete;
  ClientIo& operator=(const ClientIo&) = delete;

  // Joins the cluster (blocks until it formed), connects to every server and starts the I/O
  // thread. `heartbeat_clock` is read for each heartbeat's report.
  Status Start(const std::atomic<int64_t>& heartbeat_clock);
  // Queues requests for the I/O thread; once Stop() ended it, fails each at once (Aborted),
  // releasing the caller's buffers.
  void Submit(std::vector<Outgoing> batch);
  // Sends one control request to the scheduler and waits for its reply (at most `timeout_ms`
  // when positive; otherwise until the reply or options.stop, which gives Aborted).
  StatusOr<proto::Header> Call(proto::Header h, int timeout_ms = 0);
  // Waits (at most `timeout_ms`) until every request submitted to a server was answered or
  // failed: Finish leaves only then, as the last worker's LEAVE shuts the servers down.
  // Returns the milliseconds of `timeout_ms` left.
  int AwaitServers(int timeout_ms);
  // Lets in-flight requests finish (at most `grace_ms`), then stops the I/O thread.
  void Stop(int grace_ms = kStopGraceMs);
  // One turn driven by a waiting caller (gate().mu held): like the I/O thread's, with its poll
  // also woken by gate().done_fd. Returns false once the client is stopping (the caller stops
  // leading).
  bool LeadTurn();
  // A calling thread that drove the sockets is about to let go of gate().mu: wakes the I/O
  // thread if it sleeps on sockets that changed meanwhile.
  void LetGo();

  // Virtual time: requests submitted to servers carry `t` as their virtual time (NaN: none).
  void SetTurnTime(double t) { turn_time_.store(t); }

  const ClusterView& view() const { return link_.view(); }
  // Server ranks so far (the cluster may grow: docs/resharding.md). Any thread.
  int num_servers() const { return num_servers_.load(std::memory_order_relaxed); }
  int32_t id() const { return link_.id(); }
  int rank() const { return link_.rank(); }

 private:
  // A request sent and not yet answered.
  struct Pending {
    int target = kToScheduler;
    OpPtr op;
    float* dst = nullptr;
    int64_t dst_len = 0;
    int64_t clock = 0;
    proto::MsgType type = proto::MSG_UNKNOWN;  // of the request
    int32_t partition = 0;                     // data requests: the partition asked about
    // To send it again to a restarted server (only kept with a recovery timeout) or scheduler.
    std::optional<proto::Header> header;
    const float* src = nullptr;
    size_t src_bytes = 0;
    std::shared_ptr<const std::vector<uint8_t>> encoded;
    int64_t window_bytes = 0;  // what it counts against its server's in-flight window
    bool parked = false;       // the server said it parked it (virtual time)
    int tier_rank = -1;        // sent through the aggregator: the server rank it goes to
    // A co-located transport (worker/transport.h) that took its values, and what it took.
    std::shared_ptr<Transport> via;
    TransportSlot slot;
  };
  // A request that failed while its server may still touch the caller's array it was lent
  // (TransportSlot::lent): its operation completes once the server let go of it.
  struct Lent {
    uint64_t id = 0;
    int target = 0;
    OpPtr op;
    Status status;
    std::shared_ptr<Transport> via;
    std::shared_ptr<const void> keep;  // TransportSlot::keep: bytes the server may still read
  };

  void IoLoop();
  // One turn of the loop (gate_->mu held): sends what is queued, sleeps on the sockets'
  // descriptors for at most `timeout_ms` (also on `extra_fd` when >= 0) unless a socket is
  // dirty, and handles what is there: replies, control messages, timeouts. A socket is dirty
  // from a send on it until it is found empty (see client_io.cc); whoever lets go of the gate
  // first leaves none dirty, so each descriptor signals anything that arrives later.
  // `unlocked`: the gate's lock, let go while the turn sleeps (the I/O thread's).
  void Turn(int timeout_ms, int extra_fd, std::unique_lock<std::mutex>* unlocked);
  // A turn's sleep on the sockets' descriptors; sets look_ for those that signalled.
  void Sleep(int timeout_ms, int extra_fd, std::unique_lock<std::mutex>* unlocked);
  // Receive until empty: a server's socket, the scheduler's, every dirty one.
  void DrainServer(int rank);
  void DrainScheduler();
  void DrainDirty();
  // Whether a turn looks at server `rank`'s socket: alive, or answering a revocation.
  bool Heard(int rank) const;
  // A socket a turn looks at was sent on since it was last found empty.
  bool AnyDirty() const;
  // The sockets a turn polls: the wake socket, the scheduler's, and every server that is heard.
  void Watched(std::vector<zmq::pollitem_t>& items, std::vector<int>& ranks);
  // Wakes the I/O thread out of its sleep.
  void Nudge();
  void SendToServer(int rank, proto::Header&& header, std::vector<zmq::message_t> payload);
  // Batches (options.batch_bytes, common/batch.h): sends what waits in a server's batch.
  void FlushBatch(int rank);
  void FlushBatches();
  void DropBatch(int rank);
  // Sends one message now, or hands it to the emulated link.
  void Emit(int rank, const proto::Header& header, std::vector<zmq::message_t> payload);
  // The emulated link (options.link): hands over what is due, and the poll timeout until the
  // first of what it holds is due.
  void ReleaseDue();
  int PollTimeoutMs() const;
  void SendQueued();
  // Sends `o`, or fails it (closed, dead server), parks it (recovering server) or queues it
  // behind its server's in-flight window (options.max_in_flight_bytes).
  void Dispatch(Outgoing& o);
  // Numbers `o`, records it as pending and sends it.
  void Transmit(Outgoing& o, int64_t window_bytes);
  // Sends what waits for `rank`'s window while it has room.
  void ReleaseWaiting(int rank);
  void OnReply(Envelope& env, int from);
  // The aggregation tier (client_io_tier.cc): connects this worker's aggregator, if the view
  // gives it one.
  Status ConnectTier();
  // Whether `o` (to a server rank) waits behind pushes at the aggregator (then it is held), or
  // goes through it (then retargeted). Keeps each server's requests in the order given.
  bool TierHolds(Outgoing& o);
  // The aggregator answered a push: an error sends it to its server directly instead.
  void OnTierAnswer(Pending& p, const Status& s);
  // A push the aggregator did not apply, to send directly once nothing of its rank waits there.
  void TierFailed(Pending& p);
  // Sends what waited behind rank `rank`'s pushes at the aggregator, once none is left there.
  void ReleaseTier(int rank);
  // The aggregator died (or stopped): every push there goes directly, and so does what follows.
  void TierDown(const std::string& why);
  // Switch emulation (client_io_switch.cc): pushes to `aggregator` stream in chunks if it is a
  // switch and the cluster synchronous; whether `o` streams; its first chunks sent; one more
  // chunk; the switch summed a chunk (the next may go); streams whose push is no longer pending
  // dropped (releasing the caller's buffer).
  void UseSwitch(const proto::NodeInfo& aggregator);
  bool Streams(const Outgoing& o) const;
  struct ChunkStream;
  void StartStream(uint64_t id, Outgoing& o);
  void SendChunk(uint64_t id, ChunkStream& st);
  void OnChunkSummed(const proto::Header& h, int from);
  void DropStreams();
  // The aggregator's socket index (one past the server ranks), whether or not tier_ is set.
  int TierSocket() const { return static_cast<int>(tier_pending_.size()); }
  static Status CheckReply(const proto::Header& h, const Pending& p, int from);
  Status AcceptPull(const proto::Header& h, const Message& message, const Pending& p, int from);
  void OnControl(Envelope& env);
  void FailPending(int target, const Status& s);
  void FailAll(const Status& s);
  // Server recovery: a dead server's requests wait for SERVER_BACK (then are resent on a new
  // connection) or for the timeout (then fail).
  void OnServerDead(int rank);
  void OnServerBack(const proto::Header& h);
  void ExpireRecoveries();
  // A pending request made ready to go again (its number kept; the caller's buffer lent again).
  Outgoing Reissue(Pending& p);
  // Live re-sharding (client_io_moves.cc): a data request goes to the rank the newest map
  // places its partition on; a new epoch's map from the scheduler; a request its old rank
  // answered "moved" goes again once this client holds that epoch's map.
  void Route(Outgoing& o) const;
  void DispatchEveryServer(Outgoing& o);
  Status AddRank(const proto::Header& back, const proto::NodeInfo& node);
  int ranks() const { return static_cast<int>(tier_pending_.size()); }
  void OnShardMap(const proto::ShardMap& update);
  void OnMovedReply(Pending& p, int64_t epoch);
  void LeaveRetired(int rank);
  // Dials `server` (expecting its announced key with auth.curve).
  Status Connect(const proto::NodeInfo& server);
  // Co-located transports (worker/transport.h): for every server on this host, the first of
  // ClientOptions::transport that opens (before the I/O thread starts); the others stay on
  // their sockets.
  void AttachTransports();
  // One request and its answer on server `rank`'s socket before the I/O thread runs; a server
  // that does not know this worker yet (its view is on the way) is asked again for a second.
  StatusOr<proto::Header> Ask(int rank, proto::Header h);
  // Completes `p`'s operation with `s` (and a clock's reply `h`) and gives back its slot.
  // `answered`: its server replied to it. A request whose array the server may still touch
  // waits in lent_ instead, and the server is asked to let go (CMA_REVOKE).
  void Finish(uint64_t id, Pending& p, const Status& s, const proto::Header* h, bool answered);
  // Completes what the servers let go of; `from` >= 0: a message from a server in revoking_.
  void ReleaseLent();
  void OnRevokingMessage(Envelope& env, int from);
  bool Lends(int rank) const;

  const ClientOptions options_;
  const Auth auth_;
  ClientReport& report_;
  PullState& pulls_;
  zmq::context_t ctx_{1};
  SchedulerLink link_;
  std::vector<zmq::socket_t> servers_;
  std::vector<Batch> batches_;  // per server rank, guarded by gate_->mu
  zmq::socket_t wake_in_, wake_out_;
  std::mutex queue_mu_;
  std::vector<std::vector<Outgoing>> queue_;  // submitted batches, in order (moved whole)
  bool stopped_ = false;  // guarded by queue_mu_: the I/O thread is gone, Submit fails at once
  std::thread io_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<double> turn_time_{std::numeric_limits<double>::quiet_NaN()};  // SetTurnTime
  std::atomic<int> stop_grace_ms_{kStopGraceMs};                             // Stop's
  std::shared_ptr<IoGate> gate_ = std::make_shared<IoGate>();
  std::condition_variable settled_;  // with gate_->mu: a turn ended (AwaitServers looks again)
  bool caller_io_ = false;           // options.caller_io, and no emulated link
  // Guarded by gate_->mu: the I/O thread sleeps (without the mutex) on these sockets, written
  // only by the thread that sleeps (a leader's turn sleeps holding the mutex).
  bool sleeping_ = false;
  std::vector<void*> slept_on_;
  // Server sockets opened or closed so far, and as the I/O thread went to sleep (a socket's
  // handle may be reused by the next one).
  uint64_t sockets_changed_ = 0, slept_changed_ = 0;
  std::vector<pollfd> sleep_fds_;       // the I/O thread's own
  std::vector<zmq::pollitem_t> items_;  // Turn's, reused
  std::vector<int> item_ranks_;
  std::vector<char> look_;
  std::vector<pollfd> fds_;  // a leader's sleep
  std::vector<void*> polled_, woke_;
  std::vector<char> dirty_;  // per server rank: sent on since last found empty
  bool link_dirty_ = true;
  std::optional<DelayedLink> delayed_;  // options.link enabled
  // Exactly-once numbering of updates (Header.incarnation, seq): drawn per connection, and per
  // partition in the order the updates go out.
  const uint64_t incarnation_;
  // Whoever holds gate_->mu (the I/O thread, or a caller driving it):
  std::unordered_map<int32_t, int64_t> update_seq_;  // partition -> last seq sent
  uint64_t next_request_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_set<int> dead_servers_;
  std::unordered_map<int32_t, int> server_rank_;  // server node id -> rank
  std::unordered_map<int, std::chrono::steady_clock::time_point> recovering_;  // rank -> deadline
  const std::atomic<int64_t>* clock_ = nullptr;  // the worker's clock (Start's heartbeat_clock)
  std::unordered_map<int, std::vector<Outgoing>> parked_;  // rank -> requests while it is down
  // Live re-sharding: each partition's rank in the newest map (empty: the map the client
  // declared against, before any move), its epoch, and requests waiting for a newer epoch.
  std::vector<int32_t> routes_;
  int64_t map_epoch_ = 0;
  std::set<int32_t> retired_;  // ranks the map retired: no request goes there
  std::atomic<int> num_servers_{0};
  std::map<int64_t, std::vector<Outgoing>> moved_;
  // Per server rank: bytes of pending requests, and what waits for room under the window.
  std::vector<int64_t> in_flight_;
  std::vector<std::deque<Outgoing>> waiting_;
  std::vector<std::shared_ptr<Transport>> transports_;  // per server rank; null: its socket
  std::vector<Lent> lent_;
  // Servers declared gone whose sockets stay open until they answer CMA_REVOKE.
  std::unordered_set<int> revoking_;
  std::chrono::steady_clock::time_point lent_logged_{};
  std::optional<Status> closed_;  // set once the cluster shut down
  // The aggregation tier: the aggregator's socket is servers_[tier_] (one past the server
  // ranks; -1: none, or it died), and per server rank the pushes at the aggregator, the
  // requests held behind them and those it failed (sent directly once none is left there).
  int tier_ = -1;
  int32_t tier_node_ = -1;
  std::vector<int> tier_pending_;
  std::vector<std::deque<Outgoing>> tier_held_;
  std::vector<std::vector<std::pair<uint64_t, Outgoing>>> tier_failed_;
  // Switch emulation: the switch's fixed point (bits by its group), and per push request the
  // stream of its chunks: the push's header and values, the next chunk to send, the next to be
  // acknowledged, how many.
  std::optional<proto::SwitchSpec> switch_;
  struct ChunkStream {
    proto::Header head;
    zmq::message_t frame;
    int64_t elements = 0, count = 0, next = 0, acked = 0;
  };
  std::unordered_map<uint64_t, ChunkStream> streams_;
};

}  // namespace hetps
