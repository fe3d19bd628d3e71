#include "bench/reshard.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Reshard {
  double move_s = 0, pause_s = 0, median_gap_s = 0, moved_mib = 0;
  int64_t pushes = 0;
  bool exact = false;
};

StatusOr<Reshard> Measure(int mib) {
  const TensorSpec hot{"hot", {int64_t{1} << 20}, 0};
  const TensorSpec model{"model", {int64_t{mib} << 18}, 1};
  BenchClusterOptions options;
  options.servers = 2;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=5000"};
  options.server_flags = {"--init=zeros", "--optimizer=sgd:lr=1"};
  auto cluster = BenchCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  BenchCluster& bc = **cluster;
  if (Status s = bc.ConnectAndDeclare({hot, model}); !s.ok()) return s;
  Client& first = *bc.clients()[0];
  std::vector<float> values(model.NumElements(), 1.0f);
  if (Status s = first.Push(model.name, values.data(), model.NumElements()).Wait(); !s.ok()) {
    return s;
  }
  // Every partition on hot's rank goes to the other one.
  const ShardMap& map = first.shard_map();
  const int from = map.partitions()[map.PartitionsOf(map.TensorId("hot"))[0]].server_rank;
  std::vector<int32_t> moving;
  Reshard r;
  for (const Partition& p : map.partitions()) {
    if (p.server_rank != from) continue;
    moving.push_back(p.id);
    r.moved_mib += p.length * 4.0 / 1048576.0;
  }
  const auto origin = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - origin).count(); };
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> done(2);
  std::vector<Status> failure(2);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::vector<float> ones(hot.NumElements(), 1.0f);
      while (!stop.load() && failure[w].ok()) {
        failure[w] = bc.clients()[w]->Push(hot.name, ones.data(), hot.NumElements()).Wait();
        done[w].push_back(since());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double start = since();
  const int rc =
      bc.Ctl(fmt::format("move --partitions={} --to={}", fmt::join(moving, ","), 1 - from));
  const double end = since();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  stop = true;
  for (std::thread& w : workers) w.join();
  if (rc != 0) return Status::Internal(fmt::format("hetps ctl move ended with {}", rc));
  for (const Status& f : failure) {
    if (!f.ok()) return f;
  }
  r.move_s = end - start;
  std::vector<double> gaps;
  for (const std::vector<double>& times : done) {
    r.pushes += static_cast<int64_t>(times.size());
    for (size_t i = 1; i < times.size(); ++i) {
      gaps.push_back(times[i] - times[i - 1]);
      if (times[i] >= start && times[i - 1] <= end) {
        r.pause_s = std::max(r.pause_s, times[i] - times[i - 1]);
      }
    }
  }
  std::sort(gaps.begin(), gaps.end());
  r.median_gap_s = gaps.empty() ? 0 : gaps[gaps.size() / 2];
  std::vector<float> h(hot.NumElements());
  if (Status s = first.Pull(hot.name, h.data(), hot.NumElements()).Wait(); !s.ok()) return s;
  if (Status s = first.Pull(model.name, values.data(), model.NumElements()).Wait(); !s.ok()) {
    return s;
  }
  r.exact = std::all_of(h.begin(), h.end(), [&](float v) { return v == -float(r.pushes); }) &&
            std::all_of(values.begin(), values.end(), [](float v) { return v == -1.0f; });
  return r;
}

}  // namespace

int RunReshardBench(const std::vector<int>& mib) {
  for (int m : mib) {
    auto r = Measure(m);
    if (!r.ok()) {
      std::fprintf(stderr, "reshard %d MiB: %s\n", m, r.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "{\"bench\": \"reshard\", \"mb\": %d, \"moved_mib\": %.1f, \"move_s\": %.3f, "
        "\"pause_s\": %.3f, \"median_gap_s\": %.3f, \"pushes\": %lld, \"exact\": %s}\n",
        m, r->moved_mib, r->move_s, r->pause_s, r->median_gap_s, static_cast<long long>(r->pushes),
        r->exact ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hetps::bench
