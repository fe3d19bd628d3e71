// ServerNode: one hetps server. It binds a ROUTER for workers, joins the cluster through the
// scheduler, installs its share of the shard map and then serves PUSH / PULL / INIT / CLOCK.
//
// Threads: the router thread owns every TCP socket. Data requests are validated there and
// handed, zero-copy over inproc, to the apply thread that owns the partition (partition id mod
// threads), which applies or copies out and hands the reply back. No lock is shared between
// partitions, so concurrent workers touching different partitions never serialize.
// Consistency today is plain asynchronous (ASP): a push is applied on arrival and a pull is
// answered at once; per-worker clocks are tracked for the controllers that build on them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "server/initializer.h"
#include "server/optimizer/optimizer.h"

namespace hetps {

struct ServerOptions {
  std::string scheduler;  // tcp://host:port of the scheduler
  std::string bind = "tcp://127.0.0.1:*";
  std::string advertise;  // address workers dial; default: the bound endpoint
  int threads = 2;        // apply threads
  std::string optimizer = "sgd";
  OptimizerOptions optimizer_options;
  InitOptions init;
  int heartbeat_interval_ms = 500;
  int join_timeout_ms = 60000;
};

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
