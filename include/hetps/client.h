// hetps worker client: the whole user API (installed as <hetps/client.h>; link hetps::client).
//
//   hetps::ClientOptions options;
//   options.scheduler = "tcp://127.0.0.1:7000";
//   auto client = hetps::Client::Connect(options);        // joins the cluster (blocks)
//   if (!client.ok()) { ...client.status()... }
//   (*client)->DeclareTensors({{"fc1.w", {784, 256}, /*layer=*/0},
//                              {"fc1.b", {256}, 0}});      // collective over all workers
//   hetps::Ticket pull = (*client)->Pull("fc1.w", w.data(), w.size());
//   ...
//   hetps::Status s = pull.Wait();                         // w now holds the server's values
//   (*client)->Push("fc1.w", grad.data(), grad.size()).Wait();
//   (*client)->Clock();                                    // end of one iteration
//   (*client)->Barrier();                                  // all live workers meet here
//   (*client)->Finish();                                   // leave the cluster
//
// Push, Pull and Init are asynchronous: they return a Ticket at once, one request per
// partition, all partitions in flight together. By default (ClientOptions::caller_io) the
// calling thread sends its requests before the call returns, unless another thread is driving
// the sockets at that moment, which then sends them (a push with a codec is always encoded on
// the calling thread); a thread waiting on a Ticket handles the replies itself while no other
// thread does, and the client's I/O thread handles what nobody waits for (unwaited tickets,
// heartbeats, timeouts, a server's death or return); with caller_io false, or an emulated
// link, the I/O thread does all of it.
//
// Buffer lifetime contract (zero-copy): the memory passed to Push/Init is sent straight from
// the caller's buffer and must stay valid and unmodified until its Ticket is done; the memory
// passed to Pull must stay valid until its Ticket is done, and its contents are unspecified
// until then. A Ticket is done only after the server answered every partition and ZeroMQ
// released every frame of the caller's memory.
//
// Errors are Status values: an unknown tensor or a size mismatch is reported by the Ticket at
// once; a server's error (with its message) arrives through Wait(); a dead server fails its
// requests with UNAVAILABLE (after ClientOptions::server_recovery_timeout_ms, when set); a
// cluster shutdown fails everything pending with ABORTED; every call made during or after
// Finish() fails at once with FAILED_PRECONDITION.
//
// Thread-safety: every method may be called from any thread; tickets may be waited on from
// any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hetps/layer_accumulator.h"
#include "hetps/link.h"
#include "hetps/shard_map.h"
#include "hetps/status.h"

namespace hetps {

struct ClientOptions {
  std::string scheduler;            // tcp://host:port
  int heartbeat_interval_ms = 500;  // heartbeats carry this worker's report to the scheduler
  int rank = -1;                    // the rank to ask for (-1: any free one)
  int join_timeout_ms = 60000;      // how long Connect waits for the cluster to form
  // When a server dies, how long its requests wait for it to come back (a server restarted on
  // its --data_dir takes over its rank); they are then resent, and updates it applied before
  // are not applied twice. 0: they fail at once with UNAVAILABLE.
  int server_recovery_timeout_ms = 0;
  const std::atomic<bool>* stop = nullptr;  // optional: abort Connect/waits when set
  // Gradient compression of pushes (docs/algorithms.md, codecs): one spec for every layer,
  // "topk:density=0.01,ef=1", or per layer, "default=topk:density=0.01;layer0=none". Each
  // partition is encoded on the pushing thread; error-feedback residuals live here, per
  // partition.
  std::string push_codec = "none";
  std::string pull_codec = "none";  // codec of pull replies: none or fp16
  // An emulated edge link to the servers (hetps/link.h): requests are held until the
  // link would have delivered them, replies until they would have arrived. Off by default;
  // the scheduler's control messages are not shaped.
  LinkOptions link;
  // Federated clients: the compute slowdown this client emulates; sent with its round requests
  // (with the link above) so that the scheduler's clients.csv describes every client.
  double device_slowdown = 1;
  // Virtual time (docs/virtual-time.md): the scheduler runs --clock=virtual and this client's
  // round requests carry its virtual clock (see virtual_time()).
  bool virtual_clock = false;
  // Authentication (docs/security.md). "curve": every connection is CURVE-encrypted and proves
  // this worker's key, keys_dir/<key_name>.key (key_name default "worker"; made by `hetps
  // keygen`), and accepts only the scheduler of keys_dir/scheduler.pub and the servers whose
  // keys the scheduler announces. "none": plain TCP (clusters on loopback).
  std::string auth = "none";
  std::string keys_dir;
  std::string key_name;
  // Connect tunes this process's malloc for transfers (glibc's mmap
  // threshold to 32 MiB, its trim threshold to 1 GiB). ZeroMQ receives every message into a
  // buffer it allocates; with glibc's defaults a partition-sized buffer (up to 4 MiB) is a
  // fresh mmap whose pages fault in and are unmapped again for every message, which costs up
  // to a third of the push and pull rate. The setting is process-wide and only ever raises
  // the thresholds (memory freed stays mapped for reuse); a program that manages malloc
  // itself sets this false.
  bool tune_allocator = true;
  // Flow control: the bytes of data requests (push payloads as sent, pull replies as expected)
  // this client has in flight to one server. Further requests to that server wait here, in
  // order, until replies come back, so a server never buffers more than this of one worker's
  // unapplied pushes (without it a model of GiBs pushed at once lands in the servers' memory
  // before they apply it). 64 MiB is many times the bandwidth-delay product of a datacenter
  // link; a request larger than the window goes alone. 0: unbounded.
  int64_t max_in_flight_bytes = int64_t{64} << 20;
  // Co-located transports (docs/client.md): to a server on this machine (the same host
  // name in the cluster view, and an address of this network namespace) large payloads skip
  // the socket; headers, replies and their order stay on it. "auto" tries "shm", then "cma"
  // (where no segment can be made), and keeps the first the server accepts; "socket" uses
  // neither; or name one. shm is as fast or faster up to models of about 16 MB, cma (a copy
  // fewer, and none by this process) beyond: 1.3x shm's round trip at 64 MB (docs/benchmarks.md).
  //  - "shm": a shared memory segment of shared_memory_bytes (0: none) per server; this
  //    process copies a push in and a pull out. Memory is reserved behind it only as far as
  //    requests in flight reach, and a request that finds no room goes on the socket.
  //  - "cma", cross memory attach: for requests of 16 KiB or more, the server reads a push
  //    straight from the caller's array and writes a pull straight into it (one copy each
  //    way, none by this process; smaller ones go in frames, batched). It needs the same
  //    user, one pid namespace, and a kernel that lets the server ptrace this process (no
  //    stricter Yama ptrace_scope or seccomp policy); the server proves it can with a probe.
  //    The caller's arrays are lent until the server answers: a request that fails
  //    unanswered (the client stopped, the cluster closed) hands its array back only once the
  //    server answered a revocation or exited, so a stop may wait for a hung server.
  // Both are used with auth "curve" too: the headers stay on the authenticated socket, and the
  // payloads go where only this user can reach them (a segment of mode 0600, which the server
  // checks; ptrace rights over this process). Neither is used over an emulated link, or to a
  // server restarted during the run.
  std::string transport = "auto";
  int64_t shared_memory_bytes = int64_t{64} << 20;
  // Batching: requests to one server whose payload is smaller than this, sent
  // together (a step's pushes of many small tensors, its pulls, its clock), leave as one message
  // of up to this many payload bytes, and the server answers what it answers at once as one
  // message. Nothing waits to be batched: a batch holds the requests of one call (with
  // caller_io false: what the I/O thread found queued), so a lone request goes at once. 0: one
  // message per request.
  int64_t batch_bytes = int64_t{256} << 10;
  // Who moves the bytes. true: a request leaves from the thread that makes it, and a thread
  // waiting on a Ticket handles the replies itself while no other thread does, so an operation
  // costs the thread hand-offs of a plain socket; the client's I/O thread takes over whatever
  // no caller is waiting for (asynchronous tickets, heartbeats, timeouts). false: every send and
  // reply goes through the I/O thread (one more hand-off each way; the calling thread does no
  // socket work).
  bool caller_io = true;
  // The aggregation tier (docs/aggregation-tier.md): when the cluster has an aggregator on
  // this worker's host, dense pushes go through it (summed with the other local workers'
  // pushes, one push per partition reaches the server); everything else goes to the servers.
  // An aggregator that dies or refuses a push makes this worker push directly from then on;
  // nothing is lost or applied twice. false: always push directly.
  bool tier = true;
};

struct ClientStats {
  int64_t bytes_pushed = 0;      // payload bytes sent by Push and Init (after compression)
  int64_t raw_bytes_pushed = 0;  // the same as float32, before compression
  int64_t bytes_pulled = 0;      // payload bytes received by Pull
  int64_t requests = 0;          // partition requests sent
  int64_t messages = 0;          // messages sent to servers: a batch of requests counts once
  // Payload bytes (pushed and pulled) that went through a co-located transport instead of the
  // socket (ClientOptions::transport).
  int64_t shared_memory_bytes = 0;
  // Read staleness: for every partition read, this worker's clock minus the slowest live
  // worker's clock when the server answered (0 under bsp, <= s under ssp).
  int64_t reads = 0;
  int64_t max_staleness = 0;
  int64_t staleness_sum = 0;
  // Partition pushes the server dropped because their round had closed (backup workers).
  int64_t dropped_pushes = 0;
  // Push staleness: for every partition push applied or held, the versions the partition had
  // advanced since the values the gradient was computed from (ALGORITHMS.md §3).
  int64_t pushes = 0;
  int64_t max_push_staleness = 0;
  int64_t push_staleness_sum = 0;
  double mean_push_staleness() const {
    return pushes ? static_cast<double>(push_staleness_sum) / pushes : 0;
  }
  double mean_staleness() const { return reads ? static_cast<double>(staleness_sum) / reads : 0; }
};

class Ticket {
 public:
  Ticket() = default;  // a done, OK ticket
  // Blocks until the operation is done; returns its first error, or OK.
  Status Wait() const;
  bool Done() const;

  struct State;  // opaque; defined by the client library

 private:
  friend class Client;
  explicit Ticket(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class Client {
 public:
  // Registers with the scheduler and blocks until the cluster view arrives. A worker may also
  // join a cluster that is already running (elastic membership; a restarted worker asks for
  // its old rank with options.rank): it then starts at the clock the servers count it from,
  // the slowest live worker's (clock() says which), and is waited for from there on. In a run
  // resumed from a whole-run checkpoint every worker starts at the checkpoint's clock: a trainer
  // that derives its data order from (seed, rank, clock), as the built-in one does, continues
  // exactly where the checkpoint was taken.
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  // Finish()es if the caller did not
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int32_t id() const;  // node id assigned by the scheduler
  // 0 .. num_workers() - 1 for the workers the cluster formed with; a worker that joined
  // later may hold a higher rank (up to the scheduler's --max_workers).
  int rank() const;
  int num_workers() const;  // the workers the cluster formed with
  int num_servers() const;
  // The consistency spec the servers ran when this worker joined, every parameter spelled out
  // (e.g. "ssp:staleness=2"; `hetps ctl` may have switched it since).
  std::string consistency() const;
  // Whether the scheduler runs this cluster's federated rounds (the servers' consistency is
  // selected or committed): a client then asks for work with AwaitRound instead of clocking.
  bool scheduler_runs_rounds() const;

  // Declares the tensors this worker uses and blocks until the shard map is installed on every
  // server. Collective: returns once every live worker has declared (the map holds the union).
  // Redeclaring a tensor with another shape is an error.
  Status DeclareTensors(const std::vector<TensorSpec>& tensors);
  // REQUIRES: DeclareTensors succeeded.
  const ShardMap& shard_map() const;

  // Sparse tables (docs/tables.md): declares table `name`, rows of options.dim floats keyed by
  // any uint64 id. It joins the next DeclareTensors call, which is collective as for tensors (a
  // model of tables only calls DeclareTensors({})); every worker declares it alike. Options that
  // cannot be right (dims, counts, words) fail here; DeclareTensors then asks a server of each
  // table to build it, so a bad optimizer or eviction spec fails there.
  Status DeclareTable(const std::string& name, const TableOptions& options, int32_t layer = 0);
  // Pushes n gradient rows, grads[i * dim ...] for keys[i], to the table's optimizer. Repeated
  // keys are summed here first; the keys of each server's buckets go in one message (batched).
  // Keys and rows are copied, grouped by bucket, before the call returns: the caller's arrays
  // are free at once. A row a server cannot create (a full table without eviction) fails the
  // Ticket with that server's error; rows of other buckets may have been applied.
  Ticket PushRows(const std::string& table, const uint64_t* keys, int64_t n, const float* grads);
  // Pulls the rows of n keys into out[i * dim ...] (a repeated key fills every position); a key
  // without a row reads its initializer's values. `out` must stay valid until the Ticket is
  // done; its contents are unspecified until then.
  Ticket PullRows(const std::string& table, const uint64_t* keys, int64_t n, float* out);

  // Sends a gradient of `n` floats; the server applies its optimizer. `weight` is the number of
  // samples behind it (for weighting aggregators).
  Ticket Push(const std::string& tensor, const float* grad, int64_t n, double weight = 1.0);
  // A push whose partitions the caller encodes: for gradients the client cannot read (they
  // live on a GPU) or that the caller compresses itself. `encode` is called once per partition
  // of the tensor, in order, on this thread, before PushEncoded returns; it must write into
  // `out` the partition's encoding by `slice.codec` with the context the CPU codec would be
  // given (the codec context: key {seed, slice.partition, slice.step}, cols slice.cols),
  // so that servers decode it with the CPU codec, or slice.length raw float32 values when
  // slice.codec is "none". Error feedback is then the caller's to keep, per partition: do not
  // mix Push and PushEncoded on one tensor with an error-feedback codec. The client owns the
  // bytes once `encode` returns, so the caller's gradient memory is free when PushEncoded
  // returns. An error from `encode`, or raw bytes of the wrong size, fails the Ticket at once
  // and sends none of the tensor's partitions.
  struct PartitionSlice {
    int32_t partition = 0;           // global partition id in the shard map
    int64_t offset = 0, length = 0;  // the slice of the tensor, in elements
    std::string codec;               // the partition's push codec spec, ef=1 included; or "none"
    int64_t step = 0;                // the push's clock
    int64_t cols = 0;                // the tensor's trailing dimension when whole rows, else 0
  };
  using PartitionEncoder =
      std::function<Status(const PartitionSlice& slice, std::vector<uint8_t>& out)>;
  Ticket PushEncoded(const std::string& tensor, int64_t n, const PartitionEncoder& encode,
                     double weight = 1.0);
  // The push codec spec of a declared tensor's partitions (its layer's, ef=1 included; "none":
  // they travel as raw float32), as PushEncoded's slices name it; NOT_FOUND for an unknown one.
  StatusOr<std::string> PushCodecOf(const std::string& tensor) const;
  // Fetches the current values of a tensor into out[0..n).
  Ticket Pull(const std::string& tensor, float* out, int64_t n);
  // Many tensors in one call (every gradient of a step, every layer's values): one Ticket for
  // all, and their partitions go out together, so small ones share messages
  // (ClientOptions::batch_bytes). Each entry is what the one-tensor call takes, under the same
  // buffer contract. An unknown tensor or a wrong size in any entry fails the Ticket at once and
  // sends nothing.
  struct ConstTensorView {
    std::string tensor;
    const float* data = nullptr;
    int64_t n = 0;
  };
  struct TensorView {
    std::string tensor;
    float* data = nullptr;
    int64_t n = 0;
  };
  Ticket Push(const std::vector<ConstTensorView>& grads, double weight = 1.0);
  Ticket Pull(const std::vector<TensorView>& into);
  // Offers initial values; the first Init of each partition wins (servers run with
  // --init=worker), later ones have no effect.
  Ticket Init(const std::string& tensor, const float* values, int64_t n);

  // Ends this worker's iteration: tells every server, then advances clock(). The time between
  // Clock() calls, less the time blocked inside them, is this worker's iteration time: the
  // scheduler's straggler detection and status see it (reported on heartbeats).
  Status Clock();
  // Clock() without waiting: the ticket completes once every server let this worker go on
  // (clock() has then advanced). Not counted as blocked time in the iteration time.
  Ticket ClockAsync();
  // Optional: marks the start of an iteration. A trainer that calls it at the top of each
  // iteration keeps what it does between Clock() and the next BeginIteration() (evaluation,
  // logging) out of its iteration time, so it is not mistaken for a straggler. Without it an
  // iteration runs from one Clock() to the next.
  void BeginIteration();
  // The training loss of the minibatch behind the gradients pushed next: carried on every push
  // from now until set again (NaN: none, the default), for servers whose aggregator predicts
  // each worker's loss (--aggregator=sum:compensation=lcasgd). Pushes held for a round
  // (synchronous consistency) do not keep it.
  void SetLoss(double loss);
  // Figures the trainer wants on the scheduler's status and dashboard ("loss", "accuracy"),
  // tagged with the current clock; sent with the next heartbeat (at most 64 points per
  // heartbeat; beyond that the oldest but the first are dropped).
  void ReportMetrics(const std::map<std::string, double>& metrics);

  // The layer-wise push schedule (docs/algorithms.md, "Layer schedules"): the periods the
  // scheduler handed out on its latest heartbeat reply ("every" until one arrived). A
  // LayerAccumulator (hetps/layer_accumulator.h) follows it; a trainer of its own reads it and
  // reports what it measured of each layer with ReportLayer.
  LayerPeriods layer_schedule() const;
  // What this worker computes on, e.g. "cpu" or "cuda:1 (NVIDIA H200)": shown in `hetps status`
  // and /api/status (the trainer and hetps.torch set it).
  void SetDevice(const std::string& device);
  // One step of `layer` as the worker saw it: its gradient's and its weights' squared L2 norms
  // (the adaptive schedule's measure), and the raw bytes accumulated instead of pushed since
  // joining (shown as the schedule's savings). Sent with the next heartbeat.
  void ReportLayer(int32_t layer, double grad_norm_sq, double weight_norm_sq,
                   int64_t deferred_bytes);
  int64_t clock() const;
  // Blocks until every live worker has called Barrier (dead workers are not waited for).
  Status Barrier();

  // Federated rounds (servers run --consistency=selected; the scheduler samples clients,
  // --clients_per_round). AwaitRound blocks until the scheduler's selection policy picks this
  // client and returns the round, which clock() becomes, so the pushes that follow belong to
  // it; it returns -1 once the run's rounds are done (the client should Finish). After every
  // push of the round was acknowledged, FinishRound reports the upload and returns whether the
  // round kept it (false: it closed without it, e.g. at its deadline, and servers drop it).
  StatusOr<int64_t> AwaitRound();
  // `bit`: adaptive clipping's report of the round's update (docs/robust.md): under central DP
  // whether its norm before clipping was within round_clip() (`within`, the one bit the
  // scheduler learns of it); under local DP that bit centred (+-1/2) plus the client's Gaussian
  // noise of std round_count_noise() (`noisy`); under distributed DP the same with std
  // round_count_noise() / sqrt(K), as SecureUpload::MaskCount's word (`masked`).
  struct ClipBit {
    std::optional<bool> within;
    std::optional<double> noisy;
    std::optional<uint32_t> masked;
  };
  StatusOr<bool> FinishRound(const ClipBit& bit = {});
  // Adaptive clipping (--dp=MODE:...,quantile=Q): the clip norm of the round the last
  // AwaitRound returned (0 when the --dp spec's fixed clip holds) and, under local and
  // distributed DP, the noise multiplier of the update (z_u; 0: the spec's) and the std of the
  // bit's noise (sigma_b) the client adds.
  double round_clip() const;
  double round_update_noise() const;
  double round_count_noise() const;
  // Secure aggregation (scheduler --secure_aggregation; worker/secure_aggregation.h drives it):
  // the secure part of the last AwaitRound or FinishRound answer, a serialized proto::SecAgg
  // (the round's parameters; the unmasking asked of this client), empty when there is none;
  // and one step of the protocol with the scheduler (a serialized proto::SecAgg request),
  // answering the scheduler's serialized answer.
  const std::string& round_secagg() const;
  StatusOr<std::string> ExchangeSecAgg(const std::string& request);
  // With ClientOptions::virtual_clock: the client's virtual clock in seconds (0 at the start).
  // AwaitRound and FinishRound tell the scheduler it as the time their request happens (the
  // caller sets it first: when the client is idle and online; when its upload completed); each
  // answer sets it to the virtual time the scheduler answered at. A round's work takes no host
  // time into account: its virtual duration is the caller's models' (device, link).
  double virtual_time() const;
  void SetVirtualTime(double t);
  // Tells the scheduler that this client's next round request will carry a virtual time of at
  // least `not_before` (a selected client, once it pulled the model, knows when its training
  // ends), so that the scheduler may act on what comes earlier while this client still works.
  // Only under virtual_clock. (An evaluator declares nothing: which aggregation its next watch
  // is answered at depends on when it asks.)
  Status DeclareVirtualTime(double not_before);
  // Data-centre training in virtual time (docs/virtual-time.md; the scheduler runs
  // --clock=virtual): the scheduler grants one worker's turn at a time, in virtual-time order,
  // so the servers see every turn's requests in that order. BeginTurn blocks until this
  // worker's turn at virtual time `t` is granted; the pulls, pushes and clock issued then carry
  // t. EndTurn waits until each of `ops` (that turn's tickets) is answered, or parked by a
  // server for slower workers; it ends the turn, telling the scheduler that the next one comes
  // no earlier than the answer's time + `next_after`, then waits for what was parked. Returns
  // the virtual time the turn was answered at: t, or later when a server parked a request until
  // another worker's turn released it. Errors of the tickets are returned. FinishTurns tells
  // the scheduler that this worker takes no more turns (it no longer holds the clock back).
  Status BeginTurn(double t);
  StatusOr<double> EndTurn(const std::vector<Ticket>& ops, double next_after);
  Status FinishTurns();
  // Both tell the scheduler the payload bytes this client pushed and pulled since its previous
  // call of either (the first call sets the mark: initializing the model is not counted); the
  // rounds log counts uplink and downlink bytes from them. Call them from one thread.
  //
  // For an evaluator (a worker that measures the global model and does not train; the
  // scheduler then does not wait for it as a client): blocks until `rounds` federated rounds
  // are closed and applied on every server, or the run's rounds are done. Returns how many are
  // closed and whether the run's rounds are done. `measured`, when given, is what the
  // evaluator measured after the rounds of its previous answer: the scheduler's rounds log
  // shows it on that round's row (and holds that row back until it arrives, so an evaluator
  // reports every answer it measured, the last one too: after `finished` it calls once more).
  struct RoundsClosed {
    int64_t closed = 0;
    bool finished = false;
  };
  struct Evaluation {
    int64_t round = 0;  // RoundsClosed::closed of the answer it measured after
    double loss = 0;
    double accuracy = 0;
  };
  StatusOr<RoundsClosed> AwaitRoundsClosed(int64_t rounds,
                                           const std::optional<Evaluation>& measured = {});
  // Leaves the cluster cleanly; idempotent. Pending tickets complete before it returns: it
  // first waits (at most 5 s) for the servers to answer what is in flight, as the last
  // worker's leaving shuts them down. Every call made during or after it fails at once
  // (FailedPrecondition; a request that raced the stop: Aborted) and releases its buffers.
  Status Finish();

  ClientStats stats() const;

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // Push and Init: one request per partition, each sending its slice of `data` zero-copy, or
  // its encoding when the partition's layer has a codec (pushes only).
  enum class Update { kPush, kInit };
  Ticket Send(Update kind, const std::vector<ConstTensorView>& tensors, double weight);
  // After DeclareTensors: an empty pull of one bucket of every table, so that a table its
  // servers cannot build fails the declaration.
  Status CheckTables();
  std::unique_ptr<Impl> impl_;
};

}  // namespace hetps
