#include "bench/consistency.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_cluster.h"
#include "server/consistency/controller.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct WorkerResult {
  int64_t iterations = 0;
  double waiting_s = 0;  // in Pull().Wait() and Clock(): communication plus consistency waits
  double wall_s = 0;
  Status status;
};

// The synthetic workload's iteration: pull every tensor, compute w - target (plus simulated
// compute, stretched for the straggler), push, clock.
WorkerResult RunWorker(Client& c, const std::vector<TensorSpec>& tensors, double compute_ms,
                       double seconds) {
  WorkerResult r;
  std::vector<std::vector<float>> w, g;
  for (const TensorSpec& t : tensors) {
    w.emplace_back(t.NumElements());
    g.emplace_back(t.NumElements());
  }
  const float target = 0.1f * static_cast<float>(c.rank() + 1);
  const auto start = Clock::now();
  while (Since(start) < seconds) {
    auto t0 = Clock::now();
    std::vector<Ticket> pulls;
    for (size_t i = 0; i < tensors.size(); ++i) {
      pulls.push_back(c.Pull(tensors[i].name, w[i].data(), tensors[i].NumElements()));
    }
    for (auto& p : pulls) {
      if (Status s = p.Wait(); !s.ok()) return r.status = s, r;
    }
    r.waiting_s += Since(t0);
    const auto compute_start = Clock::now();
    for (size_t i = 0; i < tensors.size(); ++i) {
      for (size_t j = 0; j < w[i].size(); ++j) g[i][j] = w[i][j] - target;
    }
    const double left_ms = compute_ms - Since(compute_start) * 1e3;
    if (left_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(left_ms));
    std::vector<Ticket> pushes;
    for (size_t i = 0; i < tensors.size(); ++i) {
      pushes.push_back(c.Push(tensors[i].name, g[i].data(), tensors[i].NumElements()));
    }
    for (auto& p : pushes) {
      if (Status s = p.Wait(); !s.ok()) return r.status = s, r;
    }
    t0 = Clock::now();
    if (Status s = c.Clock(); !s.ok()) return r.status = s, r;
    r.waiting_s += Since(t0);
    ++r.iterations;
  }
  r.wall_s = Since(start);
  r.status = c.Finish();  // leave now, so gated controllers stop waiting for this worker
  return r;
}

std::vector<std::string> ServerFlags(const std::string& consistency) {
  return {"--consistency=" + consistency, "--optimizer=sgd:lr=0.05", "--init=zeros"};
}

// The workers' results summed up, printed as one JSON line.
struct Totals {
  int64_t iterations = 0, max_staleness = 0, reads = 0, staleness_sum = 0, dropped = 0;
  int64_t pushes = 0, push_staleness_sum = 0;
  int64_t straggler_iterations = 0, fastest_iterations = 0;
  double waiting = 0, wall = 0;

  void Add(const WorkerResult& r, const ClientStats& s, bool straggler) {
    iterations += r.iterations;
    max_staleness = std::max(max_staleness, s.max_staleness);
    reads += s.reads;
    staleness_sum += s.staleness_sum;
    dropped += s.dropped_pushes;
    pushes += s.pushes;
    push_staleness_sum += s.push_staleness_sum;
    waiting += r.waiting_s;
    wall += r.wall_s;
    if (straggler) {
      straggler_iterations = r.iterations;
    } else {
      fastest_iterations = std::max(fastest_iterations, r.iterations);
    }
  }

  void Print(const ConsistencyBenchOptions& o, const std::string& name) const {
    const double secs = wall / o.workers;
    std::printf(
        "{\"bench\":\"consistency\",\"consistency\":\"%s\",\"workers\":%d,\"servers\":%d,"
        "\"straggler_slowdown\":%.1f,\"iterations_per_s\":%.1f,\"max_staleness\":%lld,"
        "\"mean_staleness\":%.2f,\"blocked_fraction\":%.3f,\"fastest_iterations\":%lld,"
        "\"straggler_iterations\":%lld,\"dropped_pushes\":%lld,\"mean_push_staleness\":%.2f,"
        "\"seconds\":%.1f}\n",
        name.c_str(), o.workers, o.servers, o.straggler_slowdown, iterations / secs,
        static_cast<long long>(max_staleness),
        reads ? static_cast<double>(staleness_sum) / reads : 0.0, waiting / wall,
        static_cast<long long>(fastest_iterations), static_cast<long long>(straggler_iterations),
        static_cast<long long>(dropped),
        pushes ? static_cast<double>(push_staleness_sum) / pushes : 0.0, secs);
    std::fflush(stdout);
  }
};

// Runs the workers for o.seconds against a fresh cluster under controller `name`.
Status BenchOne(const ConsistencyBenchOptions& o, const std::string& name) {
  const std::vector<TensorSpec> tensors = {{"layer0", {100000}, 0}, {"layer1", {1000000}, 1}};
  BenchClusterOptions co;
  co.servers = o.servers;
  co.workers = o.workers;
  co.server_flags = ServerFlags(name);
  auto cluster = BenchCluster::Launch(co, tensors);
  if (!cluster.ok()) return cluster.status();
  auto& clients = (*cluster)->clients();
  std::vector<WorkerResult> results(o.workers);
  std::vector<std::thread> threads;
  for (int i = 0; i < o.workers; ++i) {
    threads.emplace_back([&, i] {
      const bool straggler = clients[i]->rank() == o.workers - 1;
      results[i] = RunWorker(*clients[i], tensors,
                             o.compute_ms * (straggler ? o.straggler_slowdown : 1.0), o.seconds);
    });
  }
  for (auto& t : threads) t.join();
  Totals totals;
  for (int i = 0; i < o.workers; ++i) {
    if (!results[i].status.ok()) {
      return Status(results[i].status.code(),
                    fmt::format("worker {}: {}", i, results[i].status.message()));
    }
    totals.Add(results[i], clients[i]->stats(), clients[i]->rank() == o.workers - 1);
  }
  totals.Print(o, name);
  return Status();
}

}  // namespace

int RunConsistencyBench(const ConsistencyBenchOptions& o) {
  const std::vector<std::string> controllers =
      o.controllers.empty() ? ClockDrivenControllers() : o.controllers;
  for (const std::string& name : controllers) {
    if (Status s = BenchOne(o, name); !s.ok()) {
      std::fprintf(stderr, "hetps-bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace hetps::bench
