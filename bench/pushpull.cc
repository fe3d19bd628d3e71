#include "bench/pushpull.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "bench/bench_cluster.h"
#include "bench/raw_loops.h"
#include "bench/timing.h"
#include "common/auth.h"
#include "server/optimizer/optimizer.h"

namespace hetps::bench {
namespace {

struct Throughput {
  std::vector<double> push_gbps, pull_gbps, round_gbps;  // by size
};

// The setting a cluster is measured under.
struct Setting {
  std::string transport, auth, level;
  int64_t batch_kib = ClientOptions{}.batch_bytes >> 10;
  auto operator<=>(const Setting&) const = default;
};

// The clients' settings for --transport's word: tcp is the socket (loopback TCP), as from
// another machine; shm and cma the co-located transports of those names.
TransferOptions TransferFor(const std::string& transport, int64_t batch_bytes) {
  return {.transport = transport == "tcp" ? "socket" : transport, .batch_bytes = batch_bytes};
}

// Steps per second (summed over workers) over many small tensors: push all, wait, pull all,
// wait; against RawZmqSteps with the same messages, slices alternating.
Status MeasureSmallTensors(const PushPullOptions& o, const Setting& at,
                           const std::vector<TensorSpec>& tensors, BenchCluster& cluster) {
  auto& clients = cluster.clients();
  const int64_t n = tensors[0].NumElements();
  std::vector<std::vector<std::vector<float>>> buffers(
      o.workers, std::vector<std::vector<float>>(tensors.size(), std::vector<float>(n, 1e-3f)));
  // Every tensor in one call each way, as a trainer does (Client::Push/Pull of many tensors).
  std::vector<std::vector<Client::ConstTensorView>> grads(o.workers);
  std::vector<std::vector<Client::TensorView>> values(o.workers);
  for (int w = 0; w < o.workers; ++w) {
    for (size_t t = 0; t < tensors.size(); ++t) {
      grads[w].push_back({tensors[t].name, buffers[w][t].data(), n});
      values[w].push_back({tensors[t].name, buffers[w][t].data(), n});
    }
  }
  auto step = [&](int w) {
    if (Status s = clients[w]->Push(grads[w]).Wait(); !s.ok()) return s;
    return clients[w]->Pull(values[w]).Wait();
  };
  const ClientStats before = clients[0]->stats();
  const double slice = o.seconds / (2 * kRounds);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<double> raws, steps;
  for (int r = 0; r < kRounds; ++r) {
    raws.push_back(RawZmqSteps(static_cast<int>(tensors.size()), bytes, slice));
    // Measure counts `bytes` per call: dividing by it gives steps.
    steps.push_back(Measure(cluster.Pids(), o.workers, bytes, slice, step).gbps * 1e9 /
                    static_cast<double>(bytes));
  }
  if (*std::min_element(steps.begin(), steps.end()) < 0) {
    return Status::Internal(fmt::format("a request failed (cluster log: {})", cluster.log_path()));
  }
  const double raw = Median(raws), hetps = Median(steps);
  std::vector<double> ratios;  // of neighbouring slices, which share the machine's state
  for (int r = 0; r < kRounds; ++r) ratios.push_back(steps[r] / raws[r]);
  // What batching did: messages worker 0 sent per request (1: none shared a message).
  const ClientStats after = clients[0]->stats();
  const double per_request =
      static_cast<double>(after.messages - before.messages) /
      static_cast<double>(std::max<int64_t>(1, after.requests - before.requests));
  std::printf(
      "{\"bench\":\"pushpull_tensors\",\"tensors\":%zu,\"kb\":%d,\"servers\":%d,\"workers\":%d,"
      "\"transport\":\"%s\",\"auth\":\"%s\",\"durability\":\"%s\",\"batch_kib\":%lld,"
      "\"steps_per_s\":%.1f,\"raw_zmq_steps_per_s\":%.1f,\"vs_raw\":%.2f,"
      "\"messages_per_request\":%.3f,\"seconds\":%.1f}\n",
      tensors.size(), o.kb, o.servers, o.workers, at.transport.c_str(), at.auth.c_str(),
      at.level.c_str(), static_cast<long long>(at.batch_kib), hetps, raw, Median(ratios),
      per_request, o.seconds);
  std::fflush(stdout);
  return Status();
}

// The cluster `at` is measured on: servers at durability `at.level` (data dirs under
// `data_root`), transport security `at.auth` (keys there too), `sets` sets of o.workers clients
// reached over `at.transport` (the last set with a thread doing the I/O when --io ends in
// thread), and `tensors` declared.
StatusOr<std::unique_ptr<BenchCluster>> LaunchFor(const PushPullOptions& o, const Setting& at,
                                                  const std::string& data_root,
                                                  const std::vector<TensorSpec>& tensors,
                                                  int sets) {
  BenchClusterOptions cluster_options;
  cluster_options.servers = o.servers;
  cluster_options.workers = o.workers * sets;
  cluster_options.server_flags = {"--optimizer=" + o.optimizer, "--aggregator=" + o.aggregator,
                                  "--init=zeros",
                                  fmt::format("--server_threads={}", o.server_threads)};
  if (at.level != "memory") {
    cluster_options.server_flags.push_back(
        fmt::format("--data_dir={}/{}/server{{i}}", data_root, at.level));
    cluster_options.server_flags.push_back("--durability=" + at.level);
  }
  cluster_options.scheduler_flags = {fmt::format("--partition_bytes={}", o.partition_bytes)};
  cluster_options.scheduler_bind = o.scheduler_bind;
  cluster_options.server_exec = o.server_exec;
  cluster_options.server_bind = o.server_bind;
  AuthFlags client_auth;
  if (at.auth == "curve") {
    const std::string keys = data_root + "/keys";
    if (!std::filesystem::exists(keys + "/allow")) {
      if (auto k = WriteKeys(keys, {}); !k.ok()) return k.status();
    }
    for (auto* flags : {&cluster_options.scheduler_flags, &cluster_options.server_flags}) {
      flags->push_back("--auth=curve");
      flags->push_back("--keys=" + keys);
    }
    client_auth = AuthFlags{"curve", keys, ""};
  }
  TransferOptions transfer = TransferFor(at.transport, at.batch_kib << 10);
  if (o.io[sets - 1] == "thread") transfer.thread_io_clients = o.workers;  // the last set
  return BenchCluster::Launch(cluster_options, tensors, client_auth, transfer);
}

// One tensor's push, pull and round (a push then a pull of it, each waited) by worker w of the
// set of clients from `base` on.
struct TensorOps {
  std::vector<std::unique_ptr<Client>>& clients;
  std::string name;
  int64_t n = 0;
  std::vector<std::vector<float>> buffers;
  int base = 0;
  Status Push(int w) { return clients[base + w]->Push(name, buffers[base + w].data(), n).Wait(); }
  Status Pull(int w) { return clients[base + w]->Pull(name, buffers[base + w].data(), n).Wait(); }
  Status Round(int w) {
    if (Status s = Push(w); !s.ok()) return s;
    return Pull(w);
  }
};

// --only: one operation alone for the whole time, for a profiler.
Status MeasureOnly(const PushPullOptions& o, const Setting& at, int mb, BenchCluster& cluster,
                   TensorOps& ops) {
  const size_t bytes = static_cast<size_t>(ops.n) * sizeof(float);
  const Slice alone = Measure(cluster.Pids(), o.workers, bytes, o.seconds, [&](int w) {
    return o.only == "push" ? ops.Push(w) : o.only == "pull" ? ops.Pull(w) : ops.Round(w);
  });
  if (alone.gbps < 0) {
    return Status::Internal(fmt::format("a request failed (cluster log: {})", cluster.log_path()));
  }
  std::printf(
      "{\"bench\":\"pushpull_only\",\"op\":\"%s\",\"mb\":%d,\"servers\":%d,\"workers\":%d,"
      "\"transport\":\"%s\",\"auth\":\"%s\",\"durability\":\"%s\",\"optimizer\":\"%s\","
      "\"aggregator\":\"%s\",\"gbps\":%.3f,\"cpu_s_per_gb\":%.3f,\"seconds\":%.1f}\n",
      o.only.c_str(), mb, o.servers, o.workers, at.transport.c_str(), at.auth.c_str(),
      at.level.c_str(), o.optimizer.c_str(), o.aggregator.c_str(), alone.gbps, alone.cpu_s_per_gb,
      o.seconds);
  std::fflush(stdout);
  return Status();
}

// The slices of one tensor size: the raw loops' and each set's push, pull and round.
struct SizeSlices {
  std::vector<Slice> raws, raw_pulls, raw_push_works, raw_pull_works;
  std::vector<std::vector<Slice>> pushes, pulls, rounds;  // per set
};

double MedianOf(const std::vector<Slice>& slices, double Slice::*field) {
  std::vector<double> v;
  for (const Slice& s : slices) v.push_back(s.*field);
  return Median(std::move(v));
}

// Neighbouring slices share the machine's state (its rate swings over seconds): their ratios,
// then the median, rather than the ratio of two medians.
double Paired(const std::vector<Slice>& a, const std::vector<Slice>& b) {
  std::vector<double> v;
  for (size_t r = 0; r < a.size(); ++r) v.push_back(a[r].gbps / b[r].gbps);
  return Median(std::move(v));
}

bool AnyFailed(const std::vector<Slice>& slices) {
  return std::any_of(slices.begin(), slices.end(), [](const Slice& s) { return s.gbps < 0; });
}

// Alternates short raw / push / pull / round slices so machine noise hits all alike.
SizeSlices TakeSlices(const PushPullOptions& o, int sets, const Optimizer& optimizer,
                      BenchCluster& cluster, TensorOps& ops) {
  const size_t bytes = static_cast<size_t>(ops.n) * sizeof(float);
  const std::vector<pid_t> pids = cluster.Pids();
  const double slice = o.seconds / ((4 + 3 * sets) * kRounds);
  SizeSlices s;
  s.pushes.resize(sets);
  s.pulls.resize(sets);
  s.rounds.resize(sets);
  for (int r = 0; r < kRounds; ++r) {
    s.raws.push_back(RawZmqGbps(bytes, slice));
    s.raw_pulls.push_back(RawZmqGbps(bytes, slice, {.pull = true}));
    s.raw_push_works.push_back(RawZmqGbps(bytes, slice, {.optimizer = &optimizer}));
    s.raw_pull_works.push_back(RawZmqGbps(bytes, slice, {.pull = true, .optimizer = &optimizer}));
    for (int set = 0; set < sets; ++set) {
      ops.base = set * o.workers;
      s.pushes[set].push_back(
          Measure(pids, o.workers, bytes, slice, [&](int w) { return ops.Push(w); }));
      s.pulls[set].push_back(
          Measure(pids, o.workers, bytes, slice, [&](int w) { return ops.Pull(w); }));
      s.rounds[set].push_back(
          Measure(pids, o.workers, bytes, slice, [&](int w) { return ops.Round(w); }));
    }
  }
  return s;
}

// A round's figure is the tensor's bytes (counted once) per round, so a round that costs exactly
// a push plus a pull reads 1 / (1/push + 1/pull): "round_vs_serial" 1.0.
double VsSerial(const SizeSlices& s, int set) {
  std::vector<double> v;
  for (int r = 0; r < kRounds; ++r) {
    v.push_back(s.rounds[set][r].gbps * (1 / s.pushes[set][r].gbps + 1 / s.pulls[set][r].gbps));
  }
  return Median(std::move(v));
}

// One size: its slices, a "pushpull" line per --io set (the first set's figures into `out`)
// and, with two sets, their ratios.
Status MeasureSize(const PushPullOptions& o, const Setting& at, int mb, int sets,
                   const Optimizer& optimizer, BenchCluster& cluster, TensorOps& ops,
                   Throughput& out) {
  const SizeSlices s = TakeSlices(o, sets, optimizer, cluster, ops);
  const double raw = MedianOf(s.raws, &Slice::gbps), raw_pull = MedianOf(s.raw_pulls, &Slice::gbps),
               raw_push_work = MedianOf(s.raw_push_works, &Slice::gbps),
               raw_pull_work = MedianOf(s.raw_pull_works, &Slice::gbps);
  for (int set = 0; set < sets; ++set) {
    if (AnyFailed(s.pushes[set]) || AnyFailed(s.pulls[set]) || AnyFailed(s.rounds[set])) {
      return Status::Internal(
          fmt::format("a request failed (cluster log: {})", cluster.log_path()));
    }
    const Client& first = *ops.clients[set * o.workers];
    if (at.transport != "tcp" && first.stats().shared_memory_bytes == 0) {
      return Status::Internal(fmt::format(
          "the {} transport carried nothing: the clients stayed on their sockets (cluster log: {})",
          at.transport, cluster.log_path()));
    }
    const double push = MedianOf(s.pushes[set], &Slice::gbps),
                 pull = MedianOf(s.pulls[set], &Slice::gbps),
                 round_trip = MedianOf(s.rounds[set], &Slice::gbps);
    if (set == 0) {
      out.push_gbps.push_back(push);
      out.pull_gbps.push_back(pull);
      out.round_gbps.push_back(round_trip);
    }
    std::printf(
        "{\"bench\":\"pushpull\",\"mb\":%d,\"servers\":%d,\"workers\":%d,\"partitions\":%zu,"
        "\"transport\":\"%s\",\"io\":\"%s\",\"auth\":\"%s\",\"durability\":\"%s\","
        "\"optimizer\":\"%s\",\"aggregator\":\"%s\",\"push_gbps\":%.3f,"
        "\"pull_gbps\":%.3f,\"round_gbps\":%.3f,\"raw_zmq_gbps\":%.3f,"
        "\"raw_zmq_pull_gbps\":%.3f,\"raw_push_work_gbps\":%.3f,\"raw_pull_work_gbps\":%.3f,"
        "\"push_vs_raw\":%.2f,\"pull_vs_raw\":%.2f,\"push_vs_raw_work\":%.2f,"
        "\"pull_vs_raw_work\":%.2f,\"round_vs_serial\":%.2f,\"push_cpu_s_per_gb\":%.3f,"
        "\"pull_cpu_s_per_gb\":%.3f,\"round_cpu_s_per_gb\":%.3f,\"raw_cpu_s_per_gb\":%.3f,"
        "\"seconds\":%.1f}\n",
        mb, o.servers, o.workers,
        first.shard_map().PartitionsOf(first.shard_map().TensorId(ops.name)).size(),
        at.transport.c_str(), o.io[set].c_str(), at.auth.c_str(), at.level.c_str(),
        o.optimizer.c_str(), o.aggregator.c_str(), push, pull, round_trip, raw, raw_pull,
        raw_push_work, raw_pull_work, Paired(s.pushes[set], s.raws),
        Paired(s.pulls[set], s.raw_pulls), Paired(s.pushes[set], s.raw_push_works),
        Paired(s.pulls[set], s.raw_pull_works), VsSerial(s, set),
        MedianOf(s.pushes[set], &Slice::cpu_s_per_gb), MedianOf(s.pulls[set], &Slice::cpu_s_per_gb),
        MedianOf(s.rounds[set], &Slice::cpu_s_per_gb), MedianOf(s.raws, &Slice::cpu_s_per_gb),
        o.seconds);
  }
  if (sets == 2) {
    std::printf(
        "{\"bench\":\"pushpull_io\",\"mb\":%d,\"transport\":\"%s\",\"push_caller_vs_thread\":"
        "%.2f,\"pull_caller_vs_thread\":%.2f,\"round_caller_vs_thread\":%.2f}\n",
        mb, at.transport.c_str(), Paired(s.pushes[0], s.pushes[1]), Paired(s.pulls[0], s.pulls[1]),
        Paired(s.rounds[0], s.rounds[1]));
  }
  std::fflush(stdout);
  return Status();
}

// Measures every size (or the small tensors) on a fresh cluster for setting `at`; fills `out`
// for o.mb.
Status RunLevel(const PushPullOptions& o, const Setting& at, const std::string& data_root,
                Throughput& out) {
  std::vector<TensorSpec> tensors;
  if (o.tensors > 1) {
    for (int t = 0; t < o.tensors; ++t) {
      tensors.push_back({fmt::format("small_{}", t), {int64_t{o.kb} << 8}, t});
    }
  } else {
    for (int mb : o.mb) tensors.push_back({fmt::format("bench_{}mb", mb), {int64_t{mb} << 18}, 0});
  }
  // A set of o.workers clients per --io word, in its order, all in the one cluster.
  const int sets = o.tensors > 1 ? 1 : static_cast<int>(o.io.size());
  auto optimizer = MakeOptimizer(o.optimizer);  // the raw loops' share of the servers' work
  if (!optimizer.ok()) return optimizer.status();
  auto cluster = LaunchFor(o, at, data_root, tensors, sets);
  if (!cluster.ok()) return cluster.status();
  if (o.tensors > 1) return MeasureSmallTensors(o, at, tensors, **cluster);
  auto& clients = (*cluster)->clients();
  for (size_t i = 0; i < o.mb.size(); ++i) {
    const int64_t n = tensors[i].NumElements();
    TensorOps ops{clients, tensors[i].name, n,
                  std::vector<std::vector<float>>(clients.size(), std::vector<float>(n, 1e-3f))};
    Status s = o.only.empty() ? MeasureSize(o, at, o.mb[i], sets, **optimizer, **cluster, ops, out)
                              : MeasureOnly(o, at, o.mb[i], **cluster, ops);
    if (!s.ok()) return s;
  }
  return Status();
}

// Each setting's push with durability against the same auth's in memory.
void PrintDurabilityRatios(const PushPullOptions& o, std::map<Setting, Throughput>& measured) {
  const std::string& first_transport = o.transport[0];
  for (const std::string& auth : o.auth) {
    if (!measured.contains({first_transport, auth, "memory"})) break;
    const Throughput& memory = measured[{first_transport, auth, "memory"}];
    for (const std::string& level : o.durability) {
      if (level == "memory") continue;
      for (size_t i = 0; i < o.mb.size(); ++i) {
        std::printf(
            "{\"bench\":\"pushpull_durability\",\"mb\":%d,\"transport\":\"%s\",\"auth\":\"%s\","
            "\"durability\":\"%s\",\"push_vs_memory\":%.2f}\n",
            o.mb[i], first_transport.c_str(), auth.c_str(), level.c_str(),
            measured[{first_transport, auth, level}].push_gbps[i] / memory.push_gbps[i]);
      }
    }
  }
}

// curve against none, at each durability.
void PrintAuthRatios(const PushPullOptions& o, std::map<Setting, Throughput>& measured) {
  const std::string& first_transport = o.transport[0];
  const std::string& first_level = o.durability[0];
  if (!measured.contains({first_transport, "none", first_level}) ||
      !measured.contains({first_transport, "curve", first_level})) {
    return;
  }
  for (const std::string& level : o.durability) {
    const Throughput& none = measured[{first_transport, "none", level}];
    const Throughput& curve = measured[{first_transport, "curve", level}];
    for (size_t i = 0; i < o.mb.size(); ++i) {
      std::printf(
          "{\"bench\":\"pushpull_auth\",\"mb\":%d,\"durability\":\"%s\",\"auth\":\"curve\","
          "\"push_vs_none\":%.2f,\"pull_vs_none\":%.2f}\n",
          o.mb[i], level.c_str(), curve.push_gbps[i] / none.push_gbps[i],
          curve.pull_gbps[i] / none.pull_gbps[i]);
    }
  }
}

// The co-located transports against tcp, and against their memcpy ceiling. A round copies the
// payload, one copy after another: through shared memory three times (into the push's slot,
// the server's values into the pull's slot, out into the caller's array), through cross memory
// attach twice (the server reads the push, writes the pull). memcpy / copies is its ceiling on
// one core (the optimizer's pass comes on top).
void PrintTransportRatios(const PushPullOptions& o, std::map<Setting, Throughput>& measured) {
  const std::string& first_auth = o.auth[0];
  const std::string& first_level = o.durability[0];
  const std::map<std::string, int> copies = {{"shm", 3}, {"cma", 2}};
  for (const auto& [transport, n] : copies) {
    if (!measured.contains({"tcp", first_auth, first_level}) ||
        !measured.contains({transport, first_auth, first_level})) {
      continue;
    }
    const Throughput& tcp = measured[{"tcp", first_auth, first_level}];
    const Throughput& near = measured[{transport, first_auth, first_level}];
    for (size_t i = 0; i < o.mb.size(); ++i) {
      const double memcpy_gbps = MemcpyGbps(static_cast<size_t>(o.mb[i]) << 20);
      std::printf(
          "{\"bench\":\"pushpull_transport\",\"transport\":\"%s\",\"mb\":%d,\"auth\":\"%s\","
          "\"durability\":\"%s\",\"push_vs_tcp\":%.2f,\"pull_vs_tcp\":%.2f,\"round_vs_tcp\":%.2f,"
          "\"memcpy_gbps\":%.3f,\"copies_per_round\":%d,\"round_vs_memcpy_ceiling\":%.2f}\n",
          transport.c_str(), o.mb[i], first_auth.c_str(), first_level.c_str(),
          near.push_gbps[i] / tcp.push_gbps[i], near.pull_gbps[i] / tcp.pull_gbps[i],
          near.round_gbps[i] / tcp.round_gbps[i], memcpy_gbps, n,
          near.round_gbps[i] / (memcpy_gbps / n));
    }
  }
}

// Every setting (transport x auth x durability x batch size) on its own cluster; false once one
// failed (said).
bool MeasureSettings(const PushPullOptions& o, const std::string& data_root,
                     std::map<Setting, Throughput>& measured) {
  // Batch sizes matter only to many small tensors; one tensor per size runs the default.
  const std::vector<int64_t> batches =
      o.tensors > 1 ? o.batch_kib : std::vector<int64_t>{ClientOptions{}.batch_bytes >> 10};
  for (const std::string& transport : o.transport) {
    for (const std::string& auth : o.auth) {
      for (const std::string& level : o.durability) {
        for (int64_t batch_kib : batches) {
          const Setting at{transport, auth, level, batch_kib};
          if (Status s = RunLevel(o, at, data_root, measured[at]); !s.ok()) {
            std::fprintf(stderr, "hetps-bench: transport %s, auth %s, durability %s: %s\n",
                         transport.c_str(), auth.c_str(), level.c_str(), s.ToString().c_str());
            return false;
          }
        }
      }
    }
  }
  return true;
}

}  // namespace

int RunPushPull(const PushPullOptions& o) {
  char tmpl[] = "/tmp/hetps-bench-data-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "hetps-bench: cannot create a temporary folder\n");
    return 1;
  }
  const std::string data_root = tmpl;
  std::map<Setting, Throughput> measured;
  const bool ok = MeasureSettings(o, data_root, measured);
  std::error_code ec;
  std::filesystem::remove_all(data_root, ec);
  if (!ok) return 1;
  // The ratios below are per tensor size, from the alternating slices.
  if (o.tensors > 1 || !o.only.empty()) return 0;
  PrintDurabilityRatios(o, measured);
  PrintAuthRatios(o, measured);
  PrintTransportRatios(o, measured);
  std::fflush(stdout);
  return 0;
}

}  // namespace hetps::bench
