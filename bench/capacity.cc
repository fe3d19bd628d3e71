#include "bench/capacity.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_cluster.h"

namespace hetps::bench {

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); -1 when unreadable.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// The fixed overhead: each server's memory once it started and waits for its shard map (no
// partition exists yet), read when it has not changed for 300 ms.
std::vector<int64_t> SettledRss(const std::vector<pid_t>& servers) {
  std::vector<int64_t> overhead;
  for (pid_t pid : servers) {
    int64_t last = -1, now = StatusBytes(pid, "VmRSS");
    for (int i = 0; i < 50 && now != last; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      last = now;
      now = StatusBytes(pid, "VmRSS");
    }
    overhead.push_back(now);
  }
  return overhead;
}

namespace {

double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

using Clock = std::chrono::steady_clock;

// Seconds to push (or pull) every tensor, all in flight at once.
StatusOr<double> TimeAll(Client& client, const std::vector<TensorSpec>& tensors,
                         std::vector<std::vector<float>>& values, bool pull) {
  std::vector<Ticket> tickets;
  const auto start = Clock::now();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = static_cast<int64_t>(values[t].size());
    tickets.push_back(pull ? client.Pull(tensors[t].name, values[t].data(), n)
                           : client.Push(tensors[t].name, values[t].data(), n));
  }
  for (const Ticket& ticket : tickets) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One "capacity" line per server: what it must hold against what it holds.
void PrintServers(const CapacityBenchOptions& o, const std::vector<pid_t>& servers,
                  const std::vector<int64_t>& held_params, const std::vector<int64_t>& overhead) {
  for (int i = 0; i < o.servers; ++i) {
    // Values plus Adam's two moments.
    const int64_t must_hold = 3 * held_params[i];
    const int64_t rss = StatusBytes(servers[i], "VmRSS");
    const int64_t peak = StatusBytes(servers[i], "VmHWM");
    std::printf(
        "{\"bench\":\"capacity\",\"model_mib\":%d,\"servers\":%d,\"server\":%d,\"optimizer\":"
        "\"adam\",\"params_mib\":%.0f,\"must_hold_mib\":%.0f,\"overhead_mib\":%.1f,\"rss_mib\":"
        "%.0f,\"peak_rss_mib\":%.0f,\"rss_vs_held\":%.3f,\"peak_vs_held\":%.3f}\n",
        o.model_mib, o.servers, i, Mib(held_params[i]), Mib(must_hold), Mib(overhead[i]), Mib(rss),
        Mib(peak), static_cast<double>(rss - overhead[i]) / must_hold,
        static_cast<double>(peak - overhead[i]) / must_hold);
  }
}

Status Run(const CapacityBenchOptions& o) {
  // Several tensors, as a model has, each many partitions.
  constexpr int kTensors = 8;
  const int64_t per_tensor = (int64_t{o.model_mib} << 18) / kTensors;
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < kTensors; ++t) tensors.push_back({fmt::format("w{}", t), {per_tensor}, t});
  BenchClusterOptions options;
  options.servers = o.servers;
  options.workers = 1;
  // Whole-model bursts keep servers busy for seconds on a small machine: failure detection
  // gets time in proportion.
  options.scheduler_flags = {fmt::format("--heartbeat_timeout_ms={}", 5000 + 10 * o.model_mib)};
  options.server_flags = {"--init=zeros", "--optimizer=adam:lr=1e-6"};
  auto cluster = BenchCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  BenchCluster& c = **cluster;
  std::vector<pid_t> servers = c.Pids();
  servers = std::vector<pid_t>(servers.begin() + 1, servers.begin() + 1 + o.servers);
  const std::vector<int64_t> overhead = SettledRss(servers);
  // Over TCP, as a worker on another machine: through the co-located transport the worker's
  // shared memory segments (up to ClientOptions::shared_memory_bytes per server, touched by
  // both) would count in every server's resident memory beside what it holds.
  if (Status s = c.ConnectAndDeclare(tensors, 0, {}, {.transport = "socket"}); !s.ok()) {
    return s;
  }
  Client& client = *c.clients()[0];
  const std::vector<int64_t> held_params = client.shard_map().ServerBytes();
  std::vector<std::vector<float>> values(kTensors, std::vector<float>(per_tensor, 1e-3f));
  const double model_bytes = static_cast<double>(per_tensor) * kTensors * sizeof(float);
  double push_s = 0, pull_s = 0;
  for (int r = 0; r < o.rounds; ++r) {
    auto push = TimeAll(client, tensors, values, /*pull=*/false);
    if (!push.ok()) return push.status();
    auto pull = TimeAll(client, tensors, values, /*pull=*/true);
    if (!pull.ok()) return pull.status();
    if (r > 0) {  // the first round warms buffers up
      push_s += *push;
      pull_s += *pull;
    }
    std::fprintf(stderr, "capacity: round %d/%d done\n", r + 1, o.rounds);
  }
  const int timed = o.rounds - 1;
  PrintServers(o, servers, held_params, overhead);
  std::printf(
      "{\"bench\":\"capacity_rates\",\"model_mib\":%d,\"servers\":%d,\"push_gbps\":%.2f,"
      "\"pull_gbps\":%.2f,\"worker_peak_rss_mib\":%.0f}\n",
      o.model_mib, o.servers, model_bytes * timed / push_s / 1e9,
      model_bytes * timed / pull_s / 1e9, Mib(StatusBytes(getpid(), "VmHWM")));
  std::fflush(stdout);
  return Status();
}

}  // namespace

int RunCapacityBench(const CapacityBenchOptions& o) {
  if (Status s = Run(o); !s.ok()) {
    std::fprintf(stderr, "hetps-bench capacity: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace hetps::bench
