// SchedulerNode: rendezvous and membership for one cluster. It admits the expected servers and
// workers, broadcasts the cluster view, admits workers that join (or rejoin) the running cluster,
// builds and installs the shard map from the workers' declared tensors, runs barriers, detects dead
// nodes from missed heartbeats, and shuts the servers down once every worker has left or died. It
// is on the control plane only: no tensor ever passes through it. It is also the policy brain and
// the observer: the reports riding on heartbeats feed ClusterStats (clocks, iteration times,
// staleness, stragglers, per-layer and per-server figures), served over HTTP and to `hetps status`,
// and straggler flags with the resulting quorum go to the servers as POLICY_HINT.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/auth.h"
#include "common/shard_map.h"
#include "common/status.h"
#include "scheduler/fed_rounds.h"
#include "scheduler/straggler.h"

namespace hetps {

constexpr int kMaxWorkerRanks = 1 << 20;

struct SchedulerOptions {
  std::string bind = "tcp://127.0.0.1:*";
  std::string endpoint_file;  // if set, the bound endpoint is written there once listening
  std::function<void(const std::string& endpoint)> on_listening;  // optional
  // Who may connect (common/auth.h): with auth.curve, workers, servers and operators each with
  // a key of their role; else anyone, and only on loopback unless `insecure`.
  Auth auth;
  bool insecure = false;
  int num_servers = 1;
  int num_workers = 1;  // workers the cluster forms with; more may join while it runs
  // Aggregators the cluster forms with (docs/aggregation-tier.md): each sums the pushes of the
  // workers on its host (common/tier.h) and sends one push per partition to the servers.
  int num_aggregators = 0;
  int max_workers = 0;  // live workers at most (0: no bound but the rank range, kMaxWorkerRanks)
  // Registrations admitted from one peer address (scheduler/join_limiter.h): `join_burst` at
  // once, then `join_rate` per second (0: no limit). Beyond, UNAVAILABLE: the node asks again.
  double join_rate = 16;
  int join_burst = 256;
  // Connections open at once from one peer address (common/connection_guard.h; 0: no limit).
  int max_connections_per_address = 1024;
  int64_t partition_bytes = kDefaultPartitionBytes;
  int heartbeat_timeout_ms = 5000;
  // Backups per server rank (docs/replication.md): standby servers that hold a copy of the
  // rank's partitions and take over when its primary dies (0: none).
  int replicas = 0;
  // Server ranks the cluster may grow to while it trains (docs/resharding.md; 0: num_servers).
  int max_servers = 0;
  // HTTP status (scheduler/http_status.h): -1 off, 0 any free port.
  int http_port = -1;
  std::string http_host = "127.0.0.1";
  std::string dashboard_dir;  // empty: DefaultDashboardDir()
  StragglerOptions straggler;
  // Where the scheduler keeps the cluster's membership, shard map and policy (empty: in memory
  // only, and its loss ends every node). Restarted on it, it resumes the same cluster; nodes
  // wait up to recovery_timeout_ms for it to come back.
  std::string data_dir;
  int recovery_timeout_ms = 60000;
  // Whole-run checkpoints (scheduler/checkpoints.h): where they go (empty: refused), every how
  // many clocks (0: on request only), how many complete ones to keep (0: all).
  std::string checkpoint_dir;
  int64_t checkpoint_every_clocks = 0;
  int keep_checkpoints = 2;
  // A checkpoint folder to resume from: its workers start at its clock, and the model they
  // declare must be the checkpoint's (servers load it with --restore_from).
  std::string resume_from;
  // Federated rounds with client sampling (scheduler/fed_rounds.h), for servers running the
  // consistency "selected".
  FedRoundsOptions fed;
  std::string clock = "wall";  // or "virtual" (fed.virtual_time): scheduler/virtual_clock.h
  // The layer-wise push schedule workers follow (scheduler/layer_schedule/; `hetps ctl set
  // layer_schedule=SPEC` switches it live).
  std::string layer_schedule = "every";
};

// What a scheduler refuses before it binds: node counts, partition size, HTTP port, straggler
// factors.
Status ValidateSchedulerOptions(const SchedulerOptions& options);

class SchedulerNode {
 public:
  // `stop` is polled; it must outlive Run().
  SchedulerNode(SchedulerOptions options, const std::atomic<bool>& stop);
  SchedulerNode(const SchedulerNode&) = delete;
  SchedulerNode& operator=(const SchedulerNode&) = delete;

  // Runs until every worker has left or died (then shuts the servers down) or `stop` is set
  // (then shuts every node down).
  Status Run();

 private:
  SchedulerOptions options_;
  const std::atomic<bool>& stop_;
};

}  // namespace hetps
