// Client::Impl: what the API keeps behind hetps::Client (include/hetps/client.h): the shard map,
// the push encoders, the clock, the report, the tables to declare; the connection and its
// thread are the ClientIo's. Shared by the API's files (client.cc, client_tables.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/shard_map.h"
#include "hetps/client.h"
#include "worker/client_io.h"
#include "worker/client_report.h"

namespace hetps {

// What the API keeps: the shard map, the push encoders, the clock and the report; the
// connection and its thread are the ClientIo's.
class Client::Impl {
 public:
  Impl(const ClientOptions& options, Auth auth)
      : device_slowdown(options.device_slowdown),
        link(options.link),
        virtual_clock(options.virtual_clock),
        io(options, std::move(auth), report, pulls) {}

  const double device_slowdown;  // ClientOptions: what the round requests tell the scheduler
  const LinkOptions link;
  const bool virtual_clock;
  double virtual_time = 0;  // round requests' thread only
  std::string secagg;       // the last round answer's secure part (round requests' thread)
  double round_clip = 0;    // the last task's adaptive clip norm (0: none)
  double round_update_noise = 0, round_count_noise = 0;  // ... and its clients' noise
  // An answer's virtual time moves the clock forward (never back).
  void TakeVirtualTime(const proto::FedRound& answer) {
    if (virtual_clock && answer.has_virtual_time()) {
      virtual_time = std::max(virtual_time, answer.virtual_time());
    }
  }

  std::optional<ShardMap> map;
  std::atomic<int64_t> clock{0};
  std::atomic<double> loss{std::numeric_limits<double>::quiet_NaN()};  // SetLoss
  // Compression: the push codec of each layer, and per partition its encoder (null: raw).
  compress::LayerCodecs push_codecs;
  struct Encoder {
    std::mutex mu;
    std::unique_ptr<compress::PartitionEncoder> encoder;
    std::string wire_name;
    int64_t cols = 0;
  };
  std::vector<std::unique_ptr<Encoder>> encoders;
  // A push or init request for partition `pid`, its payload still to be added.
  // Fills `o` (built in place in the request batch: a protobuf header is costly to move).
  void UpdateRequest(Outgoing& o, proto::MsgType type, int32_t pid, const OpPtr& op, int64_t step,
                     double weight) const {
    const Partition& p = map->partitions()[pid];
    o.target = p.server_rank;
    o.op = op;
    o.header.set_type(type);
    o.header.set_partition(pid);
    o.header.set_clock(step);
    o.header.set_dtype(proto::FLOAT32);
    o.header.set_num_elements(p.length);
    o.header.set_weight(weight);
    o.header.set_version(pulls.base_versions[pid].load(std::memory_order_relaxed));
    o.header.set_layer(map->tensors()[p.tensor_id].layer);
    if (const double l = loss.load(std::memory_order_relaxed);
        type == proto::PUSH && !std::isnan(l)) {
      o.header.set_loss(l);
    }
  }
  std::atomic<bool> finished{false};
  // Every call during or after Finish() fails at once with this.
  Status Open() const {
    if (!finished.load()) return Status();
    return Status::FailedPrecondition("Finish() was called: the client has left the cluster");
  }
  ClientReport report;  // what stats() and the heartbeats tell
  // Federated rounds: the payload bytes counted up to the last round request (-1: none yet;
  // the first request sets them, so a model initialized by this client is not uplink).
  std::mutex round_bytes_mu;
  int64_t round_pushed = -1, round_pulled = -1;
  // Puts the bytes pushed and pulled since the last round request into `r`.
  void AttachRoundBytes(proto::FedRound* r) {
    const ClientStats s = report.Stats();
    std::lock_guard lock(round_bytes_mu);
    if (round_pushed >= 0) {
      r->set_bytes_up(s.bytes_pushed - round_pushed);
      r->set_bytes_down(s.bytes_pulled - round_pulled);
    }
    round_pushed = s.bytes_pushed;
    round_pulled = s.bytes_pulled;
  }
  // DeclareTable: tables that join the next DeclareTensors.
  std::mutex tables_mu;
  std::vector<TensorSpec> tables;
  PullState pulls;
  ClientIo io;  // last: its thread stops before the state it uses goes away
};

}  // namespace hetps
