// AggregatorLoop: the hetps-aggregator process (docs/aggregation-tier.md). It registers with
// the scheduler (which forms the cluster with --aggregators of them), learns its group from
// the view (common/tier.h: the workers of its host), takes their pushes, sums each partition's
// (aggregator/group_sum.h) and sends each sum to the partition's server as one push carrying
// the workers' numbered pushes it holds; once the server answered, every worker in the sum
// hears the server's answer. It holds nothing a worker was told is applied: a worker's push is
// acknowledged only after its server acknowledged the sum, so a dead aggregator loses nothing
// its workers do not send again (directly; the servers recognise what its sums applied).
//
// With --auth=curve it takes only the keys its workers registered with (a ZAP handler admits
// worker keys of the allow-list), and dials each server expecting the server's key.
//
// With --switch_chunk it works as an emulated switch (aggregator/switch_sum.h,
// aggregator_switch.cc): its workers stream synchronous pushes as fixed-point chunks, summed in
// a bounded pool of slots and sent on chunk by chunk; the server assembles them
// (server/chunk_assembly.h).
//
// Compressed pushes are decoded, summed and encoded again with their codec, with the
// aggregator's own error feedback per partition (no codec of the registry sums in its
// encoding). Every request is untrusted: a wrong type, sender, size, codec or server rank gets
// an error reply and changes nothing.
//
// Thread-safety: none; Run() on one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <zmq.hpp>

#include "aggregator/group_sum.h"
#include "aggregator/shared_reads.h"
#include "aggregator/switch_sum.h"
#include "common/auth.h"
#include "common/compress/codec.h"
#include "common/connection_guard.h"
#include "common/message.h"
#include "common/scheduler_link.h"
#include "common/status.h"

namespace hetps {

struct AggregatorOptions {
  std::string scheduler;
  std::string bind = "tcp://127.0.0.1:*";
  std::string advertise;  // what workers dial (default: the bound endpoint)
  // How long a sum waits for the rest of its group, in ms; negative: by the cluster's
  // consistency (synchronous: up to 1000 ms for a slow worker; otherwise a 2 ms window).
  double window_ms = -1;
  int max_open = 4096;  // open sums at most
  // Switch emulation (aggregator/switch_sum.h): > 0, the workers stream pushes in chunks of
  // this many fixed-point words, at most switch_slots in flight, clipped to +-switch_clip;
  // 0: they push whole and the aggregator sums in float (host-local).
  int switch_chunk = 0;
  int switch_slots = 8;
  double switch_clip = 8;
  int64_t max_partition_bytes = int64_t{64} << 20;
  int max_connections_per_address = 1024;
  int heartbeat_interval_ms = 500;
  int join_timeout_ms = 60000;
  Auth auth;
  bool insecure = false;
  std::function<void(const std::string&)> on_joined;  // once the cluster formed
};

Status ValidateAggregatorOptions(const AggregatorOptions& o);

// What an aggregator did, for its log and heartbeats' reports.
struct AggregatorCounts {
  int64_t pushes = 0;         // workers' pushes summed
  int64_t sums = 0;           // sums sent upstream
  int64_t bytes_in = 0;       // payload bytes of the workers' pushes
  int64_t bytes_up = 0;       // payload bytes of the sums
  int64_t refused = 0;        // requests answered with an error here
  int64_t server_errors = 0;  // sums a server refused (their workers push directly)
  int64_t pulls = 0;          // workers' pulls answered
  int64_t pulls_up = 0;       // pulls sent upstream
  int64_t chunks = 0;         // switch emulation: chunks summed
};

class AggregatorLoop {
 public:
  AggregatorLoop(AggregatorOptions options, const std::atomic<bool>& stop);
  AggregatorLoop(const AggregatorLoop&) = delete;
  AggregatorLoop& operator=(const AggregatorLoop&) = delete;

  Status Run();
  const AggregatorCounts& counts() const { return counts_; }

 private:
  // A sum or pull sent to a server, and the workers waiting for its answer.
  struct Upstream {
    int rank = 0;
    int32_t partition = 0;
    std::vector<GroupSum::Waiter> waiters;
    bool pull = false;
  };
  // Per partition: the codec its pushes came in, and the aggregator's error feedback for it.
  struct PartitionCodec {
    std::string wire;
    std::shared_ptr<const compress::Codec> codec;
    std::unique_ptr<compress::CodecState> state;
  };

  Status Setup();
  Status ConnectServers();
  Status Connect(const proto::NodeInfo& server);
  void Poll();
  void OnPush(Envelope& env);
  Status CheckPush(const Envelope& env) const;
  // Checks what every request must be: from a live worker of the group, for a server rank.
  Status CheckRequest(const Envelope& env) const;
  // The group's pulls share the servers' replies where that shows each worker what a direct
  // pull would (aggregator/shared_reads.h; the servers' Policy.shared_reads).
  void OnPull(Envelope& env);
  void AnswerPull(const std::vector<GroupSum::Waiter>& waiters, const proto::Header& reply,
                  zmq::message_t& frame);
  // The push's values: the frame itself, or decoded (a codec's, or a misaligned frame) into
  // scratch_, valid until the next Decode.
  StatusOr<std::span<const float>> Decode(const proto::Header& h, const zmq::message_t& frame);
  void SendUp(GroupSum::Sum&& sum);
  void SendUp(std::vector<GroupSum::Sum> sums);
  void OnServerReply(int rank, Envelope& env);
  // Switch emulation (aggregator_switch.cc): a worker's chunk summed in its slot; a chunk's
  // sum sent to the server and its members told; a stream that failed answered.
  void OnChunk(Envelope& env);
  void SendChunkUp(SwitchSum::ChunkSum& c);
  void FailStream(const SwitchSum::Failed& f);
  void FailStreams(std::vector<SwitchSum::Failed> failed);
  void OnControl(Envelope& env);
  // Answers every worker of `waiters` with `reply` (a server's, or an error of our own).
  void Answer(const std::vector<GroupSum::Waiter>& waiters, const proto::Header& reply);
  void Refuse(const Envelope& env, const Status& s);
  // Fails what waits on server `rank` (it died) or on anything (`rank` < 0: stopping).
  void FailUpstream(int rank, const Status& s);
  double Now() const;

  AggregatorOptions options_;
  const std::atomic<bool>& stop_;
  zmq::context_t ctx_{1};
  std::optional<zmq::socket_t> router_;
  std::optional<ConnectionGuard> guard_;
  std::optional<ZapHandler> zap_;
  std::unique_ptr<SchedulerLink> link_;
  std::vector<zmq::socket_t> servers_;  // by rank
  std::unordered_set<int> dead_servers_;
  std::optional<GroupSum> sums_;
  std::optional<SwitchSum> switch_;
  std::vector<uint32_t> words_;  // a misaligned chunk's words
  std::unordered_map<uint64_t, Upstream> upstream_;
  uint64_t next_request_ = 1;
  std::map<int32_t, PartitionCodec> codecs_;
  SharedReads reads_;
  std::vector<float> scratch_;
  compress::CodecCache codec_cache_;
  std::unordered_map<std::string, int> errors_to_strangers_;
  AggregatorCounts counts_;
  bool shutdown_ = false;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace hetps
