// ServerNode: one hetps server. It binds a ROUTER for workers, joins the cluster through the
// scheduler, installs its share of the shard map and then serves PUSH / PULL / INIT / CLOCK.
//
// Threads: the network thread (server.cc) owns every TCP socket; data requests are validated
// there. Each partition has exactly one owning thread, so it needs no lock: partitions of at
// most inline_apply_bytes belong to the network thread itself (for them a thread hand-over
// costs more than the work), larger ones to an apply thread (apply_threads.h, partition id mod
// threads), handed over as C++ structs without copying. Serving itself is serving.h.
// Concurrent workers touching different partitions never serialize on a shared lock.
// The consistency gate (consistency_gate.h) decides when: a worker's CLOCK is answered once its
// next clock may start, a PULL once the reader's clock allows it (else it is parked), and under
// a synchronous controller (bsp) pushes are held and applied once per clock when every live
// worker finished it. The controller can be switched while training runs (SET_POLICY).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/auth.h"
#include "common/compress/codec.h"
#include "common/status.h"
#include "hetps.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/initializer.h"
#include "server/optimizer/optimizer.h"

namespace hetps {

struct ServerOptions {
  std::string scheduler;  // tcp://host:port of the scheduler
  // Optional: called once the server has joined the cluster, with a line saying so.
  std::function<void(const std::string& status)> on_joined;
  std::string bind = "tcp://127.0.0.1:*";
  std::string
      advertise;    // address workers dial; default: the bound endpoint; "tcp://H:*": H, bound port
  int threads = 2;  // apply threads
  int64_t inline_apply_bytes = 1 << 20;  // partitions up to this size are served inline
  // Spec strings of the registries (common/registry.h): the server-side update rule, how
  // pushes combine, and when they apply and reads answer (switchable while running).
  std::string optimizer = "sgd";
  std::string aggregator = "sum";
  std::string consistency = "asp";
  InitOptions init;
  int heartbeat_interval_ms = 500;
  int join_timeout_ms = 60000;
  // Durability (server/durable_store.h): where the shards live on disk (empty: in memory
  // only), what an acknowledgement promises (none, process, machine), and how often each
  // partition's log is folded into a checkpoint.
  std::string data_dir;
  std::string durability = "process";
  int64_t checkpoint_interval_ms = 10000;
  // The largest partition a shard map may give this server. A frame from a worker larger than
  // MaxFrameBytes of it closes the connection it came on before any of it is read, so a peer
  // cannot make the server hold more than that per connection; a shard map with a larger
  // partition is refused, naming this setting.
  int64_t max_partition_bytes = int64_t{64} << 20;
  // Connections open at once from one peer address (common/connection_guard.h; 0: no limit).
  int max_connections_per_address = 1024;
  // A whole-run checkpoint (common/cut.h) to start from: this server loads its rank's part, and
  // every worker starts at the checkpoint's clock. A data dir must then be empty.
  std::string restore_from;
  // A backup (docs/replication.md): the scheduler (--replicas) names the rank it backs up and
  // the primary it follows; it applies the primary's records and serves no worker until it is
  // promoted. Kept in memory (no data dir) for now.
  bool standby = false;
  // Who may connect (common/auth.h): with auth.curve, only worker keys of the allow-list (and
  // the scheduler link proves this server's key); else anyone, and only on loopback unless
  // `insecure`.
  Auth auth;
  bool insecure = false;
};

// What a server refuses before it binds or joins: thread count, the optimizer, consistency
// and aggregator specs and their combination, the initializer, the durability settings.
Status ValidateServerOptions(const ServerOptions& options);

// The largest frame a server reads from a worker: a push of its largest partition in any codec.
inline int64_t MaxFrameBytes(int64_t max_partition_bytes) {
  return compress::MaxEncodedBytes(max_partition_bytes / static_cast<int64_t>(sizeof(float)));
}

class ServerNode {
 public:
  // `stop` is polled; it must outlive Run().
  ServerNode(ServerOptions options, const std::atomic<bool>& stop);
  ServerNode(const ServerNode&) = delete;
  ServerNode& operator=(const ServerNode&) = delete;

  // Serves until the scheduler sends SHUTDOWN or `stop` is set. Fails on a bad option or when
  // the cluster cannot be joined.
  Status Run();

 private:
  ServerOptions options_;
  const std::atomic<bool>& stop_;
};

}  // namespace hetps
