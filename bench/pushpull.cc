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
#include "bench/timing.h"
#include "common/auth.h"
#include "server/optimizer/optimizer.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;

// CPU seconds (user and system, every thread) used so far by this process and by `others`
// (the cluster's processes; one that is gone counts nothing).
double CpuSeconds(const std::vector<pid_t>& others) {
  timespec self{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &self);
  double total = static_cast<double>(self.tv_sec) + static_cast<double>(self.tv_nsec) * 1e-9;
  static const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (pid_t pid : others) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t name_end = text.rfind(')');  // the command name may hold spaces
    if (name_end == std::string::npos) continue;
    std::istringstream fields(text.substr(name_end + 1));
    std::string skip;
    for (int field = 3; field < 14; ++field) fields >> skip;  // state .. cmajflt
    double utime = 0, stime = 0;                              // fields 14 and 15, in ticks
    fields >> utime >> stime;
    total += (utime + stime) / ticks_per_s;
  }
  return total;
}

// One timed slice: its rate and the CPU time it took per GB moved, on every process involved.
struct Slice {
  double gbps = -1;  // < 0: a request failed
  double cpu_s_per_gb = 0;
};

// What a raw loop moves and does besides moving it.
struct RawLoop {
  // false: `bytes` out, one byte back (as a push); true: one byte out, `bytes` back (a pull).
  bool pull = false;
  // The work hetps must do on top of the transfer, done here by the same code: after a push is
  // acknowledged, the receiver applies `optimizer` to values of its own (as a server does); a
  // pulled reply is copied into the caller's array (as a client does). Null: no work.
  const Optimizer* optimizer = nullptr;
  bool work() const { return optimizer != nullptr; }
};

// GB/s (1e9 bytes per second) of a plain DEALER->ROUTER request/answer loop over TCP loopback:
// one side sends `bytes`, handed over zero-copy and taken as ZeroMQ gives them, the other one
// byte. The two ends each have their own context (own I/O thread), as a worker and a server
// process do; both are in this process, so its CPU time is the loop's.
Slice RawZmqGbps(size_t bytes, double seconds, const RawLoop& loop = {}) {
  zmq::context_t rctx(1), sctx(1);
  zmq::socket_t router(rctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  // The work's arrays, only for a loop that does it: the receiver's parameters and optimizer
  // slots (push), the puller's array (pull).
  const bool push_work = loop.work() && !loop.pull, pull_work = loop.work() && loop.pull;
  std::vector<float> values(push_work ? n : 0, 0.f), into(pull_work ? n : 0, 0.f);
  std::vector<std::vector<float>> slots;
  std::vector<float*> slot_ptrs;
  if (push_work) {
    slots.assign(loop.optimizer->num_slots(), std::vector<float>(n, 0.f));
    for (auto& slot : slots) slot_ptrs.push_back(slot.data());
  }
  // What goes out: gradients as the benchmark's clients push them (1e-3). Bytes of 1 would be
  // floats of 2.4e-38, whose products with the learning rate underflow, which made SGD about 3x
  // slower here than on the servers' normal floats.
  std::vector<float> buffer((bytes + sizeof(float) - 1) / sizeof(float), 1e-3f);
  std::atomic<bool> done{false};
  std::thread receiver([&] {
    router.set(zmq::sockopt::rcvtimeo, 200);
    int64_t step = 0;
    while (!done.load()) {
      zmq::message_t id, data;
      if (!router.recv(id)) continue;
      (void)router.recv(data);
      (void)router.send(id, zmq::send_flags::sndmore);
      if (loop.pull) {
        (void)router.send(zmq::message_t(buffer.data(), bytes, nullptr, nullptr),
                          zmq::send_flags::none);
        continue;
      }
      (void)router.send(zmq::buffer("k", 1), zmq::send_flags::none);
      if (push_work && data.size() == bytes) {
        loop.optimizer->Apply(values.data(), static_cast<const float*>(data.data()), n,
                              slot_ptrs.data(), ++step, 1.0f);
      }
    }
  });
  zmq::socket_t dealer(sctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  auto once = [&] {
    if (loop.pull) {
      (void)dealer.send(zmq::buffer("p", 1), zmq::send_flags::none);
    } else {
      (void)dealer.send(zmq::message_t(buffer.data(), bytes, nullptr, nullptr),
                        zmq::send_flags::none);
    }
    zmq::message_t answer;
    (void)dealer.recv(answer);
    if (pull_work) {
      std::memcpy(into.data(), answer.data(), std::min(bytes, answer.size()));
    }
  };
  once();  // connect and warm up
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds({});
  int64_t sent = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    once();
    sent += static_cast<int64_t>(bytes);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double cpu = CpuSeconds({}) - cpu_start;
  done = true;
  receiver.join();
  return {sent / elapsed / 1e9, sent > 0 ? cpu / (static_cast<double>(sent) / 1e9) : 0};
}

// Steps per second of a plain DEALER->ROUTER loop moving what one step over many small
// tensors moves: `messages` requests of `bytes` each answered with one byte (the pushes), then
// `messages` one-byte requests each answered with `bytes` (the pulls), each phase all in flight.
double RawZmqSteps(int messages, size_t bytes, double seconds) {
  zmq::context_t rctx(1), sctx(1);
  zmq::socket_t router(rctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndhwm, 0);
  router.set(zmq::sockopt::rcvhwm, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::vector<char> reply(bytes, 1);
  std::atomic<bool> done{false};
  std::thread receiver([&] {
    router.set(zmq::sockopt::rcvtimeo, 200);
    while (!done.load()) {
      zmq::message_t id, data;
      if (!router.recv(id)) continue;
      (void)router.recv(data);
      (void)router.send(id, zmq::send_flags::sndmore);
      if (data.size() > 1) {
        (void)router.send(zmq::buffer("k", 1), zmq::send_flags::none);
      } else {
        (void)router.send(zmq::message_t(reply.data(), bytes, nullptr, nullptr),
                          zmq::send_flags::none);
      }
    }
  });
  zmq::socket_t dealer(sctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndhwm, 0);
  dealer.set(zmq::sockopt::rcvhwm, 0);
  dealer.connect(endpoint);
  std::vector<std::vector<char>> buffers(messages, std::vector<char>(bytes, 1));
  std::vector<std::vector<char>> into(messages, std::vector<char>(bytes));
  auto step = [&] {
    for (int i = 0; i < messages; ++i) {
      (void)dealer.send(zmq::message_t(buffers[i].data(), bytes, nullptr, nullptr),
                        zmq::send_flags::none);
    }
    for (int i = 0; i < messages; ++i) {
      zmq::message_t ack;
      (void)dealer.recv(ack);
    }
    for (int i = 0; i < messages; ++i) (void)dealer.send(zmq::buffer("p", 1));
    for (int i = 0; i < messages; ++i) {
      zmq::message_t values;
      (void)dealer.recv(values);
      std::memcpy(into[i].data(), values.data(), std::min(bytes, values.size()));
    }
  };
  step();  // connect and warm up
  const auto start = Clock::now();
  int64_t steps = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    step();
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  done = true;
  receiver.join();
  return steps / elapsed;
}

// GB/s summed over all workers, each looping `op(worker)` (one tensor-sized transfer). Each
// worker does one untimed operation first (connection set-up, first-touch of buffers); the
// timed window opens once every worker has done it and closes when the last one stops. The CPU
// time is this process's and `cluster`'s over the window.
template <typename Op>
Slice Measure(const std::vector<pid_t>& cluster, int workers, size_t bytes, double seconds, Op op) {
  std::vector<std::thread> threads;
  std::vector<int64_t> moved(workers, 0);
  std::atomic<bool> failed{false};
  std::atomic<int> warm{0};
  std::atomic<bool> go{false};
  Clock::time_point start;
  double cpu_start = 0;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      if (!op(w).ok()) failed = true;
      if (warm.fetch_add(1) + 1 == workers) {
        cpu_start = CpuSeconds(cluster);
        start = Clock::now();
        go.store(true, std::memory_order_release);
      }
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
        if (!op(w).ok()) {
          failed = true;
          return;
        }
        moved[w] += static_cast<int64_t>(bytes);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = CpuSeconds(cluster) - cpu_start;
  if (failed) return {};
  int64_t total = 0;
  for (int64_t m : moved) total += m;
  return {total / elapsed / 1e9, total > 0 ? cpu / (static_cast<double>(total) / 1e9) : 0};
}

}  // namespace

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

// GB/s of one thread's memcpy between two buffers of `bytes` (touched first), the median of
// kRounds: the ceiling of any transfer that copies the payload once.
double MemcpyGbps(size_t bytes) {
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  std::vector<double> gbps;
  for (int r = 0; r < kRounds; ++r) {
    const int reps = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes));
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i)
      std::memcpy((i % 2 ? a : b).data(), (i % 2 ? b : a).data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    gbps.push_back(static_cast<double>(bytes) * reps / s / 1e9);
  }
  return Median(gbps);
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

// Measures every size on a fresh cluster whose servers run at durability `at.level`, with
// transport security `at.auth`, reached over `at.transport`; fills `out` for o.mb. `data_root`
// holds the servers' data dirs and, for auth "curve", the keys.
Status RunLevel(const PushPullOptions& o, const Setting& at, const std::string& data_root,
                Throughput& out) {
  const std::string& auth = at.auth;
  const std::string& level = at.level;
  std::vector<TensorSpec> tensors;
  for (int mb : o.mb) tensors.push_back({fmt::format("bench_{}mb", mb), {int64_t{mb} << 18}, 0});
  BenchClusterOptions cluster_options;
  cluster_options.servers = o.servers;
  cluster_options.workers = o.workers;
  cluster_options.server_flags = {"--optimizer=" + o.optimizer, "--aggregator=" + o.aggregator,
                                  "--init=zeros",
                                  fmt::format("--server_threads={}", o.server_threads)};
  if (level != "memory") {
    cluster_options.server_flags.push_back(
        fmt::format("--data_dir={}/{}/server{{i}}", data_root, level));
    cluster_options.server_flags.push_back("--durability=" + level);
  }
  cluster_options.scheduler_flags = {fmt::format("--partition_bytes={}", o.partition_bytes)};
  cluster_options.scheduler_bind = o.scheduler_bind;
  cluster_options.server_exec = o.server_exec;
  cluster_options.server_bind = o.server_bind;
  AuthFlags client_auth;
  if (auth == "curve") {
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
  if (o.tensors > 1) {
    tensors.clear();
    for (int t = 0; t < o.tensors; ++t) {
      tensors.push_back({fmt::format("small_{}", t), {int64_t{o.kb} << 8}, t});
    }
  }
  // A set of o.workers clients per --io word, in its order, all in the one cluster.
  const int sets = o.tensors > 1 ? 1 : static_cast<int>(o.io.size());
  cluster_options.workers = o.workers * sets;
  TransferOptions transfer = TransferFor(at.transport, at.batch_kib << 10);
  if (o.io[sets - 1] == "thread") transfer.thread_io_clients = o.workers;  // the last set
  auto optimizer = MakeOptimizer(o.optimizer);  // the raw loops' share of the servers' work
  if (!optimizer.ok()) return optimizer.status();
  auto cluster = BenchCluster::Launch(cluster_options, tensors, client_auth, transfer);
  if (!cluster.ok()) return cluster.status();
  auto& clients = (*cluster)->clients();
  if (o.tensors > 1) return MeasureSmallTensors(o, at, tensors, **cluster);
  for (size_t i = 0; i < o.mb.size(); ++i) {
    const std::string& name = tensors[i].name;
    const int64_t n = tensors[i].NumElements();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    // Alternate short raw / push / pull / round slices so machine noise hits all alike; report
    // the median of each. A round is a push then a pull of the same tensor, each waited; its
    // figure is the tensor's bytes (counted once) per round, so a round that costs exactly a
    // push plus a pull reads 1 / (1/push + 1/pull): "round_vs_serial" 1.0.
    const std::vector<pid_t> pids = (*cluster)->Pids();
    int base = 0;  // the first client of the set measured (--io)
    std::vector<std::vector<float>> buffers(clients.size(), std::vector<float>(n, 1e-3f));
    auto push_op = [&](int w) {
      return clients[base + w]->Push(name, buffers[base + w].data(), n).Wait();
    };
    auto pull_op = [&](int w) {
      return clients[base + w]->Pull(name, buffers[base + w].data(), n).Wait();
    };
    auto round_op = [&](int w) {
      if (Status s = push_op(w); !s.ok()) return s;
      return pull_op(w);
    };
    if (!o.only.empty()) {
      const Slice alone = o.only == "push"   ? Measure(pids, o.workers, bytes, o.seconds, push_op)
                          : o.only == "pull" ? Measure(pids, o.workers, bytes, o.seconds, pull_op)
                                             : Measure(pids, o.workers, bytes, o.seconds, round_op);
      if (alone.gbps < 0) {
        return Status::Internal(
            fmt::format("a request failed (cluster log: {})", (*cluster)->log_path()));
      }
      std::printf(
          "{\"bench\":\"pushpull_only\",\"op\":\"%s\",\"mb\":%d,\"servers\":%d,\"workers\":%d,"
          "\"transport\":\"%s\",\"auth\":\"%s\",\"durability\":\"%s\",\"optimizer\":\"%s\","
          "\"aggregator\":\"%s\",\"gbps\":%.3f,\"cpu_s_per_gb\":%.3f,\"seconds\":%.1f}\n",
          o.only.c_str(), o.mb[i], o.servers, o.workers, at.transport.c_str(), auth.c_str(),
          level.c_str(), o.optimizer.c_str(), o.aggregator.c_str(), alone.gbps, alone.cpu_s_per_gb,
          o.seconds);
      std::fflush(stdout);
      continue;
    }
    const double slice = o.seconds / ((4 + 3 * sets) * kRounds);
    std::vector<Slice> raws, raw_pulls, raw_push_works, raw_pull_works;
    std::vector<std::vector<Slice>> pushes(sets), pulls(sets), rounds(sets);
    for (int r = 0; r < kRounds; ++r) {
      raws.push_back(RawZmqGbps(bytes, slice));
      raw_pulls.push_back(RawZmqGbps(bytes, slice, {.pull = true}));
      raw_push_works.push_back(RawZmqGbps(bytes, slice, {.optimizer = optimizer->get()}));
      raw_pull_works.push_back(
          RawZmqGbps(bytes, slice, {.pull = true, .optimizer = optimizer->get()}));
      for (int set = 0; set < sets; ++set) {
        base = set * o.workers;
        pushes[set].push_back(Measure(pids, o.workers, bytes, slice, push_op));
        pulls[set].push_back(Measure(pids, o.workers, bytes, slice, pull_op));
        rounds[set].push_back(Measure(pids, o.workers, bytes, slice, round_op));
      }
    }
    auto median = [](const std::vector<Slice>& slices, double Slice::*field) {
      std::vector<double> v;
      for (const Slice& s : slices) v.push_back(s.*field);
      return Median(std::move(v));
    };
    // Neighbouring slices share the machine's state (its rate swings over seconds): their
    // ratios, then the median, rather than the ratio of two medians.
    auto paired = [](const std::vector<Slice>& a, const std::vector<Slice>& b) {
      std::vector<double> v;
      for (size_t r = 0; r < a.size(); ++r) v.push_back(a[r].gbps / b[r].gbps);
      return Median(std::move(v));
    };
    // A round against a push then a pull, each of the same round of slices.
    auto vs_serial = [&](int set) {
      std::vector<double> v;
      for (int r = 0; r < kRounds; ++r) {
        v.push_back(rounds[set][r].gbps * (1 / pushes[set][r].gbps + 1 / pulls[set][r].gbps));
      }
      return Median(std::move(v));
    };
    auto failed = [](const std::vector<Slice>& slices) {
      return std::any_of(slices.begin(), slices.end(), [](const Slice& s) { return s.gbps < 0; });
    };
    const double raw = median(raws, &Slice::gbps), raw_pull = median(raw_pulls, &Slice::gbps),
                 raw_push_work = median(raw_push_works, &Slice::gbps),
                 raw_pull_work = median(raw_pull_works, &Slice::gbps);
    for (int set = 0; set < sets; ++set) {
      if (failed(pushes[set]) || failed(pulls[set]) || failed(rounds[set])) {
        return Status::Internal(
            fmt::format("a request failed (cluster log: {})", (*cluster)->log_path()));
      }
      const Client& first = *clients[set * o.workers];
      if (at.transport != "tcp" && first.stats().shared_memory_bytes == 0) {
        return Status::Internal(fmt::format(
            "the {} transport carried nothing: the clients stayed on their sockets (cluster log: "
            "{})",
            at.transport, (*cluster)->log_path()));
      }
      const double push = median(pushes[set], &Slice::gbps),
                   pull = median(pulls[set], &Slice::gbps),
                   round_trip = median(rounds[set], &Slice::gbps);
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
          o.mb[i], o.servers, o.workers,
          first.shard_map().PartitionsOf(first.shard_map().TensorId(name)).size(),
          at.transport.c_str(), o.io[set].c_str(), auth.c_str(), level.c_str(), o.optimizer.c_str(),
          o.aggregator.c_str(), push, pull, round_trip, raw, raw_pull, raw_push_work, raw_pull_work,
          paired(pushes[set], raws), paired(pulls[set], raw_pulls),
          paired(pushes[set], raw_push_works), paired(pulls[set], raw_pull_works), vs_serial(set),
          median(pushes[set], &Slice::cpu_s_per_gb), median(pulls[set], &Slice::cpu_s_per_gb),
          median(rounds[set], &Slice::cpu_s_per_gb), median(raws, &Slice::cpu_s_per_gb), o.seconds);
    }
    if (sets == 2) {
      std::printf(
          "{\"bench\":\"pushpull_io\",\"mb\":%d,\"transport\":\"%s\",\"push_caller_vs_thread\":"
          "%.2f,\"pull_caller_vs_thread\":%.2f,\"round_caller_vs_thread\":%.2f}\n",
          o.mb[i], at.transport.c_str(), paired(pushes[0], pushes[1]), paired(pulls[0], pulls[1]),
          paired(rounds[0], rounds[1]));
    }
    std::fflush(stdout);
  }
  return Status();
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
  int code = 0;
  for (const std::string& transport : o.transport) {
    for (const std::string& auth : o.auth) {
      for (const std::string& level : o.durability) {
        // Batch sizes matter only to many small tensors; one tensor per size runs the default.
        const std::vector<int64_t> batches =
            o.tensors > 1 ? o.batch_kib : std::vector<int64_t>{ClientOptions{}.batch_bytes >> 10};
        for (int64_t batch_kib : batches) {
          const Setting at{transport, auth, level, batch_kib};
          if (Status s = RunLevel(o, at, data_root, measured[at]); !s.ok()) {
            std::fprintf(stderr, "hetps-bench: transport %s, auth %s, durability %s: %s\n",
                         transport.c_str(), auth.c_str(), level.c_str(), s.ToString().c_str());
            code = 1;
            break;
          }
        }
        if (code != 0) break;
      }
      if (code != 0) break;
    }
    if (code != 0) break;
  }
  std::error_code ec;
  std::filesystem::remove_all(data_root, ec);
  // The ratios below are per tensor size, from the alternating slices.
  if (code != 0 || o.tensors > 1 || !o.only.empty()) return code;
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
  const std::string& first_level = o.durability[0];
  if (measured.contains({first_transport, "none", first_level}) &&
      measured.contains({first_transport, "curve", first_level})) {
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
  const std::string& first_auth = o.auth[0];
  // A round copies the payload, one copy after another: through shared memory three times
  // (into the push's slot, the server's values into the pull's slot, out into the caller's
  // array), through cross memory attach twice (the server reads the push, writes the pull).
  // memcpy / copies is its ceiling on one core (the optimizer's pass comes on top).
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
  std::fflush(stdout);
  return 0;
}

}  // namespace hetps::bench
