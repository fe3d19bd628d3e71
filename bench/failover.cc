#include "bench/failover.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

BenchClusterOptions Cluster(int replicas, int workers, int heartbeat_timeout_ms) {
  BenchClusterOptions o;
  o.servers = 2;
  o.workers = workers;
  o.standbys = 2 * replicas;
  o.scheduler_flags = {fmt::format("--replicas={}", replicas),
                       fmt::format("--heartbeat_timeout_ms={}", heartbeat_timeout_ms)};
  o.server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--heartbeat_interval_ms=100"};
  return o;
}

// Pushes of `mib` MiB per second with `in_flight` outstanding, for `seconds`.
StatusOr<double> Throughput(int replicas, int mib, const std::string& transport,
                            const FailoverBenchOptions& o) {
  const TensorSpec t{"model", {int64_t{mib} << 18}, 0};
  TransferOptions transfer;
  transfer.transport = transport;
  auto cluster = BenchCluster::Launch(Cluster(replicas, 1, 5000), {t}, {}, transfer);
  if (!cluster.ok()) return cluster.status();
  Client& c = *(*cluster)->clients()[0];
  std::vector<float> ones(t.NumElements(), 1.0f);
  auto round = [&](int n) -> Status {
    std::vector<Ticket> tickets;
    for (int k = 0; k < n; ++k) tickets.push_back(c.Push(t.name, ones.data(), t.NumElements()));
    for (Ticket& k : tickets) {
      if (Status s = k.Wait(); !s.ok()) return s;
    }
    return Status();
  };
  // With backups, pushes count once each standby holds every partition: the first round.
  if (Status s = round(o.in_flight); !s.ok()) return s;
  int64_t pushes = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < o.seconds) {
    if (Status s = round(o.in_flight); !s.ok()) return s;
    pushes += o.in_flight;
  }
  // A push is answered before it is applied: the pull (served after every apply before it)
  // makes the figure the rate at which pushes are applied.
  if (Status s = c.Pull(t.name, ones.data(), t.NumElements()).Wait(); !s.ok()) return s;
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (ones[0] != -static_cast<float>(pushes + o.in_flight)) {
    return Status::Internal(
        fmt::format("{} pushes applied, {} acknowledged", -ones[0], pushes + o.in_flight));
  }
  return pushes * (static_cast<double>(mib) / 1024) / secs;  // GiB/s
}

struct Stall {
  double stall_s = 0, before_s = 0;
  bool exact = false;
  int64_t pushes = 0;
};

StatusOr<Stall> MeasureStall(int mib, const FailoverBenchOptions& o) {
  const TensorSpec t{"model", {int64_t{mib} << 18}, 0};
  auto cluster = BenchCluster::Start(Cluster(1, 2, o.heartbeat_timeout_ms));
  if (!cluster.ok()) return cluster.status();
  BenchCluster& bc = **cluster;
  if (Status s = bc.ConnectAndDeclare({t}, /*server_recovery_timeout_ms=*/30000); !s.ok()) {
    return s;
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> pushes{0};
  std::vector<double> longest(2, 0), before(2, 0);
  std::atomic<bool> killed{false};
  Status failure;
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::vector<float> ones(t.NumElements(), 1.0f);
      auto last = Clock::now();
      while (!stop.load()) {
        Status s = bc.clients()[w]->Push(t.name, ones.data(), t.NumElements()).Wait();
        if (!s.ok()) {
          failure = s;
          return;
        }
        ++pushes;
        const auto now = Clock::now();
        const double gap = std::chrono::duration<double>(now - last).count();
        (killed.load() ? longest : before)[w] =
            std::max((killed.load() ? longest : before)[w], gap);
        last = now;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  killed = true;
  Status kill = bc.KillServer(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * o.heartbeat_timeout_ms + 2000));
  stop = true;
  for (std::thread& w : workers) w.join();
  if (!kill.ok()) return kill;
  if (!failure.ok()) return failure;
  std::vector<float> values(t.NumElements());
  if (Status s = bc.clients()[0]->Pull(t.name, values.data(), t.NumElements()).Wait(); !s.ok()) {
    return s;
  }
  Stall r;
  r.pushes = pushes.load();
  r.exact = std::all_of(values.begin(), values.end(),
                        [&](float v) { return v == -static_cast<float>(r.pushes); });
  r.stall_s = *std::max_element(longest.begin(), longest.end());
  r.before_s = *std::max_element(before.begin(), before.end());
  return r;
}

}  // namespace

int RunFailoverBench(const FailoverBenchOptions& o) {
  for (int mib : o.mib) {
    auto stall = MeasureStall(mib, o);
    if (!stall.ok()) {
      std::fprintf(stderr, "failover %d MiB: %s\n", mib, stall.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "{\"bench\": \"failover_stall\", \"mb\": %d, \"heartbeat_timeout_ms\": %d, "
        "\"stall_s\": %.3f, \"longest_gap_before_kill_s\": %.3f, \"pushes\": %lld, "
        "\"exact\": %s}\n",
        mib, o.heartbeat_timeout_ms, stall->stall_s, stall->before_s,
        static_cast<long long>(stall->pushes), stall->exact ? "true" : "false");
    std::fflush(stdout);
    // "socket": the workers on other machines than the servers (as a replicated deployment
    // is); "auto": co-located, the pushes through shared memory and only the copies to the
    // backups on sockets.
    for (const std::string transport : {"socket", "auto"}) {
      auto r0 = Throughput(0, mib, transport, o);
      auto r1 = r0.ok() ? Throughput(1, mib, transport, o) : r0;
      if (!r1.ok()) {
        std::fprintf(stderr, "failover %d MiB: %s\n", mib, r1.status().ToString().c_str());
        return 1;
      }
      std::printf(
          "{\"bench\": \"failover_throughput\", \"mb\": %d, \"transport\": \"%s\", "
          "\"in_flight\": %d, \"r0_gibps\": %.3f, \"r1_gibps\": %.3f, \"r1_vs_r0\": %.3f}\n",
          mib, transport.c_str(), o.in_flight, *r0, *r1, *r1 / *r0);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace hetps::bench
