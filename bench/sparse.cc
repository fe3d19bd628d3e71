#include "bench/sparse.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_set>

#include "bench/bench_cluster.h"
#include "bench/capacity.h"
#include "bench/raw_loops.h"
#include "bench/timing.h"
#include "common/subprocess.h"
#include "common/zipf.h"
#include "server/optimizer/optimizer.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Batches of keys from the Zipf stream (ids scrambled so popular ids are not small numbers),
// with their gradient rows.
struct Batches {
  std::vector<std::vector<uint64_t>> keys;
  std::vector<float> grads;  // one batch's rows, reused by every push
  int64_t unique = 0;        // distinct keys per batch, on average
};

Batches MakeBatches(const SparseBenchOptions& o, int64_t dim, int count, uint64_t seed) {
  const ZipfSampler zipf(o.ids, o.zipf);
  std::mt19937_64 rng(seed);
  Batches b;
  for (int i = 0; i < count; ++i) {
    std::vector<uint64_t>& keys = b.keys.emplace_back(static_cast<size_t>(o.keys_per_op));
    for (uint64_t& k : keys) k = zipf(rng) * 0x9e3779b97f4a7c15ULL;
    b.unique += static_cast<int64_t>(std::unordered_set<uint64_t>(keys.begin(), keys.end()).size());
  }
  b.unique /= count;
  b.grads.assign(static_cast<size_t>(o.keys_per_op * dim), 0.001f);
  return b;
}

// Rows per second (keys in the calls) of `op` over the batches, for `seconds`.
StatusOr<double> RowsPerSecond(const SparseBenchOptions& o, const Batches& b, double seconds,
                               const std::function<Status(const std::vector<uint64_t>&)>& op) {
  int64_t ops = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    if (Status s = op(b.keys[ops % b.keys.size()]); !s.ok()) return s;
    ++ops;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(ops * o.keys_per_op) / elapsed;
}

// `hetps status --json` of the bench cluster, once the servers reported what was done.
StatusOr<nlohmann::json> ClusterStatus(const BenchCluster& cluster, const std::string& bin_dir) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // two heartbeats
  auto r =
      RunCaptured({bin_dir + "/hetps", "status", "--json", "--scheduler=" + cluster.endpoint()});
  if (!r.ok()) return r.status();
  if (!r->succeeded()) return Status::Internal("hetps status failed: " + r->output);
  return nlohmann::json::parse(r->output);
}

// The table's figures summed over the servers: rows, hits, misses, evicted.
struct TableTotals {
  int64_t rows = 0, hits = 0, misses = 0, evicted = 0;
};
TableTotals Totals(const nlohmann::json& status) {
  TableTotals t;
  for (const auto& s : status.at("servers")) {
    for (const auto& table : s.at("tables")) {
      t.rows += table.at("rows").get<int64_t>();
      t.hits += table.at("hits").get<int64_t>();
      t.misses += table.at("misses").get<int64_t>();
      t.evicted += table.at("evicted").get<int64_t>();
    }
  }
  return t;
}

// Loads `rows` distinct keys and returns the servers' resident bytes per row over what they held
// before (the fixed overhead).
StatusOr<double> BytesPerRow(BenchCluster& cluster, const SparseBenchOptions& o, int64_t dim,
                             int64_t rows) {
  const std::vector<pid_t> pids = cluster.Pids();  // the scheduler's, then the servers'
  const std::vector<pid_t> servers(pids.begin() + 1, pids.begin() + 1 + o.servers);
  const std::vector<int64_t> before = SettledRss(servers);
  Client& c = *cluster.clients()[0];
  std::vector<uint64_t> keys(static_cast<size_t>(o.keys_per_op));
  std::vector<float> grads(keys.size() * dim, 0.001f);
  for (int64_t first = 0; first < rows; first += o.keys_per_op) {
    const int64_t n = std::min<int64_t>(o.keys_per_op, rows - first);
    for (int64_t i = 0; i < n; ++i) keys[i] = (1 + first + i) * 0xd1b54a32d192ed03ULL;
    if (Status s = c.PushRows("emb", keys.data(), n, grads.data()).Wait(); !s.ok()) return s;
  }
  const std::vector<int64_t> after = SettledRss(servers);
  int64_t grown = 0;
  for (size_t i = 0; i < servers.size(); ++i) grown += after[i] - before[i];
  return static_cast<double>(grown) / static_cast<double>(rows);
}

// Pull then push each batch of a long fresh stream (as training does) with the table capped;
// the hit rate is that of the stream's pulls.
Status RunStream(BenchCluster& cluster, const SparseBenchOptions& o, int64_t dim,
                 const std::string& bin_dir, nlohmann::json& out) {
  Client& c = *cluster.clients()[0];
  auto before = ClusterStatus(cluster, bin_dir);
  if (!before.ok()) return before.status();
  const ZipfSampler zipf(o.ids, o.zipf);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(static_cast<size_t>(o.keys_per_op));
  std::vector<float> rows(keys.size() * dim), grads(keys.size() * dim, 0.001f);
  double busy = 0;
  for (int64_t i = 0; i < o.stream_ops; ++i) {
    for (uint64_t& k : keys) k = zipf(rng) * 0x9e3779b97f4a7c15ULL;
    const auto start = Clock::now();
    if (Status s = c.PullRows("emb", keys.data(), o.keys_per_op, rows.data()).Wait(); !s.ok()) {
      return s;
    }
    if (Status s = c.PushRows("emb", keys.data(), o.keys_per_op, grads.data()).Wait(); !s.ok()) {
      return s;
    }
    busy += std::chrono::duration<double>(Clock::now() - start).count();
  }
  auto after = ClusterStatus(cluster, bin_dir);
  if (!after.ok()) return after.status();
  const TableTotals t0 = Totals(*before), t1 = Totals(*after);
  const double hits = static_cast<double>(t1.hits - t0.hits);
  const double misses = static_cast<double>(t1.misses - t0.misses);
  out["stream_ops"] = o.stream_ops;
  out["stream_rows_per_s"] = 2.0 * static_cast<double>(o.stream_ops * o.keys_per_op) / busy;
  out["rows_held"] = t1.rows;
  out["cap_held"] = t1.rows <= o.max_rows * o.servers;
  out["hit_rate"] = hits + misses > 0 ? hits / (hits + misses) : 0;
  out["evicted"] = t1.evicted - t0.evicted;
  return Status();
}

// One kind of call, on every client at once for `seconds`: rows per second summed.
enum class Call { kPush, kPull, kRound };
StatusOr<double> AllClients(BenchCluster& cluster, const SparseBenchOptions& o, int64_t dim,
                            const std::vector<Batches>& batches, Call call, double seconds) {
  const size_t n = cluster.clients().size();
  std::vector<StatusOr<double>> rates(n, 0.0);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      Client& c = *cluster.clients()[w];
      std::vector<float> rows(static_cast<size_t>(o.keys_per_op * dim));
      const Batches& b = batches[w];
      auto op = [&](const std::vector<uint64_t>& k) {
        Status s = call == Call::kPull
                       ? Status()
                       : c.PushRows("emb", k.data(), o.keys_per_op, b.grads.data()).Wait();
        if (s.ok() && call != Call::kPush) {
          s = c.PullRows("emb", k.data(), o.keys_per_op, rows.data()).Wait();
        }
        return s;
      };
      rates[w] = RowsPerSecond(o, b, seconds, op);
    });
  }
  for (std::thread& t : threads) t.join();
  double sum = 0;
  for (auto& r : rates) {
    if (!r.ok()) return r.status();
    sum += *r;
  }
  return sum;
}

// Rows per second of pushes, pulls and push-then-pull rounds of Zipf batches, each client one
// call at a time, alternating with a raw ZeroMQ loop moving one call's bytes; medians over
// kRounds.
Status MeasureRates(BenchCluster& cluster, const SparseBenchOptions& o, int64_t dim,
                    nlohmann::json& out) {
  std::vector<Batches> batches;
  for (size_t w = 0; w < cluster.clients().size(); ++w) {
    batches.push_back(MakeBatches(o, dim, 64, 7 + w));
  }
  std::vector<double> pushes, pulls, rounds, raws;
  // A call moves its unique keys and their rows (the client sums repeats): the raw loop moves
  // the same bytes, one way, answered with one byte.
  const size_t op_bytes = static_cast<size_t>(batches[0].unique * (8 + 4 * dim));
  for (int r = 0; r < kRounds; ++r) {
    for (auto [call, into] :
         {std::pair{Call::kPush, &pushes}, {Call::kPull, &pulls}, {Call::kRound, &rounds}}) {
      auto rate = AllClients(cluster, o, dim, batches, call, o.seconds / kRounds);
      if (!rate.ok()) return rate.status();
      into->push_back(*rate);
    }
    const Slice raw = RawZmqGbps(op_bytes, o.seconds / kRounds);
    raws.push_back(raw.gbps * 1e9 / static_cast<double>(op_bytes) * o.keys_per_op);
  }
  out["workers"] = cluster.clients().size();
  out["unique_keys_per_op"] = batches[0].unique;
  out["push_rows_per_s"] = Median(pushes);
  out["pull_rows_per_s"] = Median(pulls);
  out["round_rows_per_s"] = Median(rounds);
  out["push_rows_per_s_per_server"] = Median(pushes) / o.servers;
  out["pull_rows_per_s_per_server"] = Median(pulls) / o.servers;
  out["raw_zmq_rows_per_s"] = Median(raws);
  out["push_vs_raw"] = Median(pushes) / Median(raws);
  return Status();
}

Status RunOne(const SparseBenchOptions& o, int64_t dim, const std::string& eviction,
              const std::string& bin_dir) {
  TableOptions table;
  table.dim = dim;
  table.max_rows = o.max_rows;
  table.eviction = eviction;
  BenchClusterOptions options;
  options.servers = o.servers;
  options.workers = o.workers;
  options.server_flags = {"--optimizer=" + o.optimizer};
  auto cluster = BenchCluster::Launch(options, {TensorSpec("emb", {dim}, 0, table)});
  if (!cluster.ok()) return cluster.status();
  auto optimizer = MakeOptimizer(o.optimizer);
  if (!optimizer.ok()) return optimizer.status();
  const int64_t row_bytes = (dim + (*optimizer)->RowStateFloats(dim)) * 4;
  nlohmann::json out = {{"bench", "sparse"},
                        {"servers", o.servers},
                        {"dim", dim},
                        {"keys_per_op", o.keys_per_op},
                        {"ids", o.ids},
                        {"zipf", o.zipf},
                        {"max_rows", o.max_rows},
                        {"eviction", eviction},
                        {"optimizer", o.optimizer},
                        {"row_bytes", row_bytes}};
  if (o.max_rows == 0) {
    auto per_row = BytesPerRow(**cluster, o, dim, o.memory_rows);
    if (!per_row.ok()) return per_row.status();
    out["memory_rows"] = o.memory_rows;
    out["server_bytes_per_row"] = *per_row;
    out["memory_vs_row_bytes"] = *per_row / static_cast<double>(row_bytes);
  }
  if (Status s = MeasureRates(**cluster, o, dim, out); !s.ok()) return s;
  if (o.max_rows > 0) {
    if (Status s = RunStream(**cluster, o, dim, bin_dir, out); !s.ok()) return s;
  }
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return Status();
}

}  // namespace

int RunSparseBench(const SparseBenchOptions& o) {
  const std::string bin_dir = SelfDir();
  for (int64_t dim : o.dims) {
    for (const std::string& eviction : o.evictions) {
      if (Status s = RunOne(o, dim, eviction, bin_dir); !s.ok()) {
        std::fprintf(stderr, "sparse bench (dim %ld, eviction %s): %s\n", static_cast<long>(dim),
                     eviction.c_str(), s.ToString().c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace hetps::bench
