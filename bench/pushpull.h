// `hetps-bench pushpull`: push and pull throughput of a local cluster against the ceiling of a
// plain ZeroMQ DEALER->ROUTER loopback transfer of the same size, measured in the same run:
// push against a loop that sends the bytes, pull against one that answers with them, and both
// also against the same loops doing the work hetps must do besides (the servers' optimizer after
// each push is acknowledged, the copy of each pull's reply into the caller's array), which
// tells the framework's own cost from that work's.
#pragma once

#include <string>
#include <vector>

namespace hetps::bench {

struct PushPullOptions {
  int servers = 1;
  int workers = 1;
  std::vector<int> mb = {1, 16, 64};  // tensor sizes in MiB
  double seconds = 6;                 // per size, shared by raw, push and pull slices
  int server_threads = 2;
  std::string optimizer = "sgd:lr=1e-9";  // the servers' rule: every push applies it
  std::string aggregator = "sum";         // the servers' aggregator spec
  long long partition_bytes = 4 << 20;
  std::string scheduler_bind = "tcp://127.0.0.1:*";
  std::string server_exec;  // see BenchClusterOptions
  std::string server_bind = "tcp://127.0.0.1:*";
  // Server durability levels to measure, each on a fresh cluster: "memory" (no data dir) or a
  // --durability level with a data dir (none, process, machine).
  std::vector<std::string> durability = {"memory"};
  // Transport security to measure, each on a fresh cluster: "none" or "curve" (every
  // connection CURVE-encrypted, keys made for the run).
  std::vector<std::string> auth = {"none"};
  // Worker-to-server transport to measure, each on a fresh cluster: "tcp" (the socket carries
  // the payloads) or "shm" (the co-located transport: payloads through shared memory, headers
  // on the socket; ClientOptions::shared_memory_bytes).
  std::vector<std::string> transport = {"tcp"};
  // Who moves the bytes (ClientOptions::caller_io): "caller" (true) or "thread" (false). Both:
  // the same cluster has a set of `workers` clients for each, their slices alternating, and
  // caller's push, pull and round are also printed as ratios to thread's (the median of the
  // ratios of neighbouring slices).
  std::vector<std::string> io = {"caller"};
  // > 1: instead of one tensor per size, steps over this many tensors of `kb` KiB each (a
  // model's many small tensors): each step pushes all of them (in flight together), waits,
  // pulls all of them, waits. Compared with a raw ZeroMQ loop of the same messages.
  int tensors = 1;
  int kb = 4;
  // With tensors > 1: ClientOptions::batch_bytes in KiB to measure, each on a fresh cluster
  // (0: one message per request).
  std::vector<int64_t> batch_kib = {256};
  // "push", "pull" or "round": only that operation, one window of `seconds` per size (to
  // profile it); empty: raw, push, pull and round slices alternating.
  std::string only;
};

// Prints one JSON object per size (or, with tensors > 1, per step shape), auth and level on
// stdout, then with more than one level and
// "memory" among them, each level's push throughput as a ratio to memory's, and with "none" and
// "curve" both, curve's push and pull throughput as ratios to none's, and with "tcp" and "shm"
// both, shm's push, pull and round as ratios to tcp's beside a memcpy of the same size measured
// in the same run; returns the process exit code.
int RunPushPull(const PushPullOptions& options);

}  // namespace hetps::bench
