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

// A rank moved to a new process while two workers push: a standby started into the running
// cluster copies the rank (sync), then `hetps ctl drain-server` hands it over (drain). Times in
// seconds from the workers' start.
struct Move {
  double standby_at = 0, drain_from = -1, drained_at = -1;
  double before_s = 0, sync_stall_s = 0, drain_stall_s = 0;
  double median_gap_s = 0;  // a push's usual time, for scale
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
  std::vector<Status> failure(2);  // each worker's own
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::vector<float> ones(t.NumElements(), 1.0f);
      auto last = Clock::now();
      while (!stop.load()) {
        Status s = bc.clients()[w]->Push(t.name, ones.data(), t.NumElements()).Wait();
        if (!s.ok()) {
          failure[w] = s;
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
  for (const Status& f : failure) {
    if (!f.ok()) return f;
  }
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

// The completion times (seconds from `origin`) of each worker's pushes; the longest gap
// between two that overlaps [from, to].
double LongestGap(const std::vector<std::vector<double>>& done, double from, double to) {
  double longest = 0;
  for (const std::vector<double>& times : done) {
    for (size_t i = 1; i < times.size(); ++i) {
      if (times[i] >= from && times[i - 1] <= to)
        longest = std::max(longest, times[i] - times[i - 1]);
    }
  }
  return longest;
}

StatusOr<Move> MeasureMove(int mib) {
  const TensorSpec t{"model", {int64_t{mib} << 18}, 0};
  // Failure detection as deployed (5 s): copying a large rank keeps both cores busy, and
  // nothing here is about detecting a failure.
  BenchClusterOptions options = Cluster(1, 2, 5000);
  options.standbys = 0;  // added while the workers push
  auto cluster = BenchCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  BenchCluster& bc = **cluster;
  if (Status s = bc.ConnectAndDeclare({t}, /*server_recovery_timeout_ms=*/30000); !s.ok()) {
    return s;
  }
  const auto origin = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - origin).count(); };
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> done(2);
  std::vector<Status> failure(2);  // each worker's own, read once they are joined
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::vector<float> ones(t.NumElements(), 1.0f);
      while (!stop.load() && failure[w].ok()) {
        failure[w] = bc.clients()[w]->Push(t.name, ones.data(), t.NumElements()).Wait();
        if (!failure[w].ok()) failed = true;
        done[w].push_back(since());
      }
    });
  }
  Move r;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  r.standby_at = since();
  Status s = bc.StartStandby();
  // The standby backs up one rank; a drain of it is refused until it holds all of it, a drain
  // of the other always.
  // Bounded: a copy that takes minutes, or a cluster that fell apart, ends the measurement.
  while (s.ok() && r.drained_at < 0 && since() < r.standby_at + 120) {
    for (int rank = 0; rank < 2 && r.drained_at < 0 && s.ok(); ++rank) {
      const double start = since();
      const int rc = bc.Ctl(fmt::format("--timeout_ms=20000 drain-server --rank={}", rank));
      if (rc == 0) {
        r.drain_from = start;
        r.drained_at = since();
      } else if (rc != 1 || failed.load()) {
        s = Status::Internal(fmt::format("hetps ctl drain-server ended with {}", rc));
      }
    }
    if (r.drained_at < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  stop = true;
  for (std::thread& w : workers) w.join();
  if (!s.ok()) return s;
  for (const Status& f : failure) {
    if (!f.ok()) return f;
  }
  if (r.drained_at < 0) {
    return Status::DeadlineExceeded("the standby did not hold its rank within 120 s");
  }
  std::vector<float> values(t.NumElements());
  if (s = bc.clients()[0]->Pull(t.name, values.data(), t.NumElements()).Wait(); !s.ok()) return s;
  r.pushes = static_cast<int64_t>(done[0].size() + done[1].size());
  r.exact = std::all_of(values.begin(), values.end(),
                        [&](float v) { return v == -static_cast<float>(r.pushes); });
  std::vector<double> gaps;
  for (const std::vector<double>& times : done) {
    for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  }
  std::sort(gaps.begin(), gaps.end());
  r.median_gap_s = gaps.empty() ? 0 : gaps[gaps.size() / 2];
  r.before_s = LongestGap(done, 0, r.standby_at);
  r.sync_stall_s = LongestGap(done, r.standby_at, r.drain_from);
  r.drain_stall_s = LongestGap(done, r.drain_from, r.drained_at);
  return r;
}

}  // namespace

int RunMoveBench(const std::vector<int>& mib) {
  for (int m : mib) {
    auto r = MeasureMove(m);
    if (!r.ok()) {
      std::fprintf(stderr, "move %d MiB: %s\n", m, r.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "{\"bench\": \"move\", \"mb\": %d, \"sync_s\": %.3f, \"sync_stall_s\": %.3f, "
        "\"drain_s\": %.3f, \"drain_stall_s\": %.3f, \"longest_gap_before_s\": %.3f, "
        "\"median_gap_s\": %.3f, "
        "\"pushes\": %lld, \"exact\": %s}\n",
        m, r->drain_from - r->standby_at, r->sync_stall_s, r->drained_at - r->drain_from,
        r->drain_stall_s, r->before_s, r->median_gap_s, static_cast<long long>(r->pushes),
        r->exact ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}

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
