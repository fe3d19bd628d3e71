#include "worker/synthetic.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "common/mix.h"

namespace hetps {
namespace {

// Target of worker `rank` for element j of tensor t: uniform in [-1, 1).
float Target(uint64_t seed, int rank, size_t t, int64_t j) {
  uint64_t h = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(rank) << 32 ^ t) ^
                          static_cast<uint64_t>(j));
  return static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0);
}

struct Targets {
  std::vector<std::string> names;
  std::vector<std::vector<float>> w, grad, target, optimum;
};

Targets MakeTargets(const SyntheticOptions& o, int rank, int num_workers) {
  Targets m;
  for (size_t t = 0; t < o.tensor_elements.size(); ++t) {
    const int64_t n = o.tensor_elements[t];
    m.names.push_back(fmt::format("layer{}", t));
    m.w.emplace_back(n);
    m.grad.emplace_back(n);
    auto& target = m.target.emplace_back(n);
    auto& optimum = m.optimum.emplace_back(n, 0.0f);
    for (int64_t j = 0; j < n; ++j) target[j] = Target(o.seed, rank, t, j);
    for (int r = 0; r < num_workers; ++r) {
      for (int64_t j = 0; j < n; ++j) optimum[j] += Target(o.seed, r, t, j) / num_workers;
    }
  }
  return m;
}

// Root-mean-square distance of the pulled model to w*.
double DistanceToOptimum(const Targets& m) {
  double sum = 0;
  int64_t count = 0;
  for (size_t t = 0; t < m.w.size(); ++t) {
    for (size_t j = 0; j < m.w[t].size(); ++j) {
      const double d = m.w[t][j] - m.optimum[t][j];
      sum += d * d;
    }
    count += static_cast<int64_t>(m.w[t].size());
  }
  return std::sqrt(sum / static_cast<double>(count));
}

// Stretches this iteration's compute to (compute_ms + real compute time) * slowdown.
void SimulateCompute(const SyntheticOptions& o, std::chrono::steady_clock::time_point start) {
  const double real_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double target_ms = (o.compute_ms + real_ms) * o.slowdown;
  if (target_ms > real_ms) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(target_ms - real_ms));
  }
}

Status PullAll(Client& client, Targets& m) {
  std::vector<Ticket> tickets;
  for (size_t t = 0; t < m.w.size(); ++t) {
    tickets.push_back(client.Pull(m.names[t], m.w[t].data(), static_cast<int64_t>(m.w[t].size())));
  }
  for (const Ticket& ticket : tickets) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return Status();
}

}  // namespace

Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  if (o.tensor_elements.empty() || o.iterations < 1) {
    return Status::InvalidArgument("need at least one tensor and one iteration");
  }
  if (!(o.slowdown >= 1.0) || o.compute_ms < 0) {
    return Status::InvalidArgument("slowdown must be >= 1 and compute_ms >= 0");
  }
  return Status();
}

namespace {

// Declares the tensors, offers zeros as their initial values and pulls the starting model.
Status Begin(Client& client, const SyntheticOptions& o, Targets& m) {
  std::vector<TensorSpec> specs;
  for (size_t t = 0; t < m.names.size(); ++t) {
    specs.push_back({m.names[t], {o.tensor_elements[t]}, static_cast<int32_t>(t)});
  }
  if (Status s = client.DeclareTensors(specs); !s.ok()) return s;
  // Start from zeros when the servers take their initial values from workers (--init=worker);
  // the first Init wins, and servers with their own initializer ignore it.
  std::vector<Ticket> inits;
  for (size_t t = 0; t < m.names.size(); ++t) {
    inits.push_back(
        client.Init(m.names[t], m.grad[t].data(), static_cast<int64_t>(m.grad[t].size())));
  }
  for (const Ticket& ticket : inits) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return PullAll(client, m);
}

// One iteration: pull, the gradient w - target, the simulated compute time, push, clock.
Status Iterate(Client& client, const SyntheticOptions& o, Targets& m) {
  if (Status s = PullAll(client, m); !s.ok()) return s;
  const auto compute_start = std::chrono::steady_clock::now();
  for (size_t t = 0; t < m.w.size(); ++t) {
    auto& g = m.grad[t];
    for (size_t j = 0; j < g.size(); ++j) g[j] = m.w[t][j] - m.target[t][j];
  }
  SimulateCompute(o, compute_start);
  std::vector<Ticket> pushes;
  for (size_t t = 0; t < m.w.size(); ++t) {
    pushes.push_back(
        client.Push(m.names[t], m.grad[t].data(), static_cast<int64_t>(m.grad[t].size())));
  }
  for (const Ticket& ticket : pushes) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return client.Clock();
}

void PrintDone(Client& client, const SyntheticOptions& o, double initial, double final_distance,
               double loop_s) {
  const ClientStats stats = client.stats();
  std::printf(
      "rank %d done: distance to optimum %.4f -> %.4f after %d iterations in %.2f s; read "
      "staleness max %lld mean %.2f; %lld late pushes dropped; push staleness max %lld mean "
      "%.2f\n",
      client.rank(), initial, final_distance, o.iterations, loop_s,
      static_cast<long long>(stats.max_staleness), stats.mean_staleness(),
      static_cast<long long>(stats.dropped_pushes),
      static_cast<long long>(stats.max_push_staleness), stats.mean_push_staleness());
  std::fflush(stdout);
}

}  // namespace

Status RunSynthetic(Client& client, const SyntheticOptions& o, const std::atomic<bool>& stop) {
  if (Status s = ValidateSyntheticOptions(o); !s.ok()) return s;
  Targets m = MakeTargets(o, client.rank(), client.num_workers());
  if (Status s = Begin(client, o, m); !s.ok()) return s;
  const double initial = DistanceToOptimum(m);
  int64_t model_bytes = 0;
  for (const auto& w : m.w) model_bytes += static_cast<int64_t>(w.size() * sizeof(float));
  spdlog::info(
      "synthetic workload: {} tensors in {} partitions, {:.1f} MiB, {} iterations; "
      "distance to optimum {:.4f}",
      m.names.size(), client.shard_map().partitions().size(), model_bytes / 1048576.0, o.iterations,
      initial);

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The job is `iterations` clocks. Usually one loop is one clock; under backup workers a late
  // worker's Clock() moves it up to the open step, so it stops when the others do.
  for (int it = 1; client.clock() < o.iterations && !stop.load(); ++it) {
    if (Status s = Iterate(client, o, m); !s.ok()) return s;
    const int64_t clock = client.clock();
    if (clock % o.progress_every == 0 || clock >= o.iterations) {
      std::printf("iter %lld/%d  distance %.4f  %.1f it/s  %.2f GB/s pushed+pulled\n",
                  static_cast<long long>(clock), o.iterations, DistanceToOptimum(m), it / seconds(),
                  2.0 * model_bytes * it / seconds() / 1e9);
      std::fflush(stdout);
    }
  }
  if (stop.load()) return Status::Aborted("interrupted");
  const double loop_s = seconds();
  if (Status s = client.Barrier(); !s.ok()) return s;
  if (Status s = PullAll(client, m); !s.ok()) return s;
  const double final_distance = DistanceToOptimum(m);
  PrintDone(client, o, initial, final_distance, loop_s);
  if (!(final_distance < initial)) {
    return Status::Internal(fmt::format("the model did not converge: distance {:.4f} -> {:.4f}",
                                        initial, final_distance));
  }
  return Status();
}

}  // namespace hetps
